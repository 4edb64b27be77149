"""The serve command as a user runs it: trtpool-serve on any repository, and scripts/serve.sh."""
from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.harness.clients import TINY_TOLERANCE, grpc_input, http_input
from tests.harness.docs import FENCE, command_argv, fenced_block, quoted_command
from tests.harness.repository import add_broken_models, add_example
from tests.harness.serve_command import TRTPOOL_SERVE, Ports, ServeCommand, environment, serve_sh, trtpool_serve
from tests.harness.server import ROOT, SHM, TEST_SHM_PREFIX, TRITONSERVER
from trtpool_builder.engine.gpu import current_gpu
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_ops.command import ServeOptions, tritonserver_command
from trtpool_ops.locate import find_tritonserver
from trtpool_ops.serve import parser
from trtpool_ops.server_log import NO_GPU_NOTE

NEWCOMER_PATH = "/usr/local/bin:/usr/bin:/bin"


def test_command_line_loads_chosen_models_and_passes_flags_through():
    options = ServeOptions(Path("/r"), models=("a", "b"), passthrough=("--log-verbose=1",))
    command = tritonserver_command("tritonserver", options)
    assert command[:5] == ["tritonserver", "--model-repository=/r", "--model-control-mode=explicit",
                           "--load-model=a", "--load-model=b"]
    assert "--exit-on-error=false" in command and "--strict-readiness=false" in command
    assert command[-1] == "--log-verbose=1"
    strict = tritonserver_command("tritonserver", ServeOptions(Path("/r"), strict=True))
    assert "--load-model=*" in strict and "--exit-on-error=true" in strict and "--strict-readiness=true" in strict
    with pytest.raises(ValueError, match="--model-control-mode"):
        tritonserver_command("tritonserver", ServeOptions(Path("/r"), passthrough=("--model-control-mode=poll",)))


OPERATIONS = "docs/operations.md"
PROCESS_FILE = "docs/how-to/write-a-process-file.md"


def load_failure_example() -> list[str]:
    """The lines of docs/operations.md's example of a model that fails to load (two models, the summary)."""
    [block] = [block for _, block in FENCE.findall((ROOT / OPERATIONS).read_text())
               if block.strip().startswith("[serve]   engine_on_cpu: FAILED TO LOAD")]
    lines = [line.strip() for line in block.splitlines() if line.strip().startswith("[serve] ")]
    assert len(lines) == 3, block
    return lines


@pytest.fixture(scope="module")
def mixed_repository(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """tiny, and models that cannot load here (an engine folder on this CPU machine among them)."""
    base = tmp_path_factory.mktemp("mixed")
    add_example(base / "repo", base / "onnx", "tiny", contexts="1")
    return base / "repo", add_broken_models(base / "repo", base / "onnx")


def test_failed_models_are_listed_with_their_reason_and_the_others_serve(mixed_repository, tmp_path):
    repo, broken = mixed_repository
    serve = trtpool_serve(repo, tmp_path / "server.log", "--watch-interval=0", "--exit-timeout-secs=5")
    try:
        serve.wait_for("[serve] ready:")
        output = serve.output()
        assert "--exit-timeout-secs=5" in output.split("tritonserver command:")[1].splitlines()[0]
        assert "[serve]   tiny: READY" in output
        for model, fragment in broken.items():
            [line] = [l for l in serve.lines if l.startswith(f"[serve]   {model}: FAILED TO LOAD:")]
            assert fragment in line, line
        assert f"{len(broken)} failed to load" in output
        for line in load_failure_example():   # the docs quote what users see (its repo: one broken)
            line = line.replace("1 failed to load", f"{len(broken)} failed to load")
            assert line in serve.lines, f"{OPERATIONS} line not in the output: {line}\n{output}"
        x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
        with httpclient.InferenceServerClient(serve.ports.http_url) as client:
            assert client.is_server_ready()
            y = client.infer("tiny", [http_input("INPUT0", x, "FP32")]).as_numpy("OUTPUT0")
        np.testing.assert_allclose(y, tiny_reference(x), **TINY_TOLERANCE)
    finally:
        assert serve.stop() == 0


def test_strict_start_up_stops_on_a_model_that_fails_to_load(mixed_repository, tmp_path):
    repo, _ = mixed_repository
    serve = trtpool_serve(repo, tmp_path / "server.log", "--strict", "--watch-interval=0")
    assert serve.process.wait(180) == 1
    output = serve.output()
    assert "exited with status" in output and "during start-up" in output
    # The reason comes from tritonserver's log, not a tail that may miss it.
    assert "failed to load 'engine_on_cpu'" in output
    assert "engines run on a GPU" in output
    assert "CudaDriverHelper has not been initialized" not in output   # Triton's start-up noise stays in the log


def test_serve_sh_serves_only_the_examples_in_MODELS(tmp_path):
    serve = serve_sh({"MODELS": "tiny", "TRTPOOL_SERVER_LOG": str(tmp_path / "server.log")}, "--watch-interval=0")
    try:
        serve.wait_for("[serve] ready:", timeout=300)
        with grpcclient.InferenceServerClient(serve.ports.grpc_url) as client:
            states = {m["name"]: m.get("state", "") for m in client.get_model_repository_index(as_json=True)["models"]}
        assert states["tiny"] == "READY"
        assert states["resnet50"] == "" and states["bert_base"] == "", states   # present, never loaded
        assert "FAILED" not in serve.output()
        [skipped] = [line.split("--models): ", 1)[1] for line in serve.lines if "not loaded (not in --models)" in line]
        assert {"bert_base", "resnet50"} <= set(skipped.split(", ")) and "tiny" not in skipped
        # The client line it prints is the README's, with the checkout's paths, its port and model.
        client = quoted_command(".venv/bin/python scripts/client.py --protocol grpc --url 127.0.0.1:8001 --model resnet50")
        client = client.replace(".venv/", f"{ROOT}/.venv/").replace(" scripts/", f" {ROOT}/scripts/")
        client = client.replace("127.0.0.1:8001", serve.ports.grpc_url).replace("resnet50", "tiny")
        assert f"[serve] once ready, try: {client}" in serve.lines, serve.output()
    finally:
        assert serve.stop() == 0


def test_the_client_line_serve_sh_prints_works_for_a_pipeline_example(tmp_path):
    """docs/how-to/write-a-process-file.md's `MODELS="resnet50_jpeg bert_text" scripts/serve.sh`: the client
    line it prints is the page's, and sends the JPEG the example generation wrote beside the model (IMAGE is
    BYTES of shape [N, 1]); the page's Python snippet gets the same answer; client.py sends bert_text its sample text
    the same way, and without --file says which file it wants."""
    models = command_argv(quoted_command('MODELS="resnet50_jpeg', PROCESS_FILE)).pop(0).removeprefix("MODELS=")
    serve = serve_sh({"MODELS": models, "TRTPOOL_SERVER_LOG": str(tmp_path / "server.log")}, "--watch-interval=0")
    try:
        serve.wait_for("[serve] ready: 2 model(s) serving", timeout=600)
        client = quoted_command(".venv/bin/python scripts/client.py --protocol grpc --url 127.0.0.1:8001 --model "
                                "resnet50_jpeg", PROCESS_FILE)
        client = client.replace(".venv/", f"{ROOT}/.venv/").replace(" scripts/", f" {ROOT}/scripts/")
        client = client.replace(" model_repository/", f" {ROOT}/model_repository/")
        client = client.replace("127.0.0.1:8001", serve.ports.grpc_url)
        assert f"[serve] once ready, try: {client}" in serve.lines, serve.output()
        done = subprocess.run(shlex.split(client), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "LABELS: shape [1, 5] dtype object" in done.stdout and "SCORES: shape [1, 5] dtype float32" in done.stdout
        labels = done.stdout.split("first values ")[1].splitlines()[0]
        snippet = fenced_block("import numpy as np", PROCESS_FILE).replace("127.0.0.1:8001", serve.ports.grpc_url)
        done = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, capture_output=True, text=True, timeout=120)
        names = re.findall(r"b'([^']+)'", done.stdout)
        assert done.returncode == 0 and len(names) == 5, done
        assert names[:len(re.findall("b'", labels))] == re.findall(r"b'([^']+)'", labels), (labels, done.stdout)
        text = [*shlex.split(client)[:-4], "--model", "bert_text", "--batch", "2"]
        done = subprocess.run([*text, "--file", str(ROOT / "model_repository" / "bert_text" / "sample.txt")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "LABEL: shape [2, 1] dtype object" in done.stdout, done
        done = subprocess.run(text, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and done.stderr.strip() == (
            "client.py: model 'bert_text' takes input 'TEXT' as bytes (BYTES of shape [N, 1]: an encoded image, "
            "a text): give the file to send with --file PATH (the examples' folder has one: "
            "model_repository/bert_text/sample.*)"), done
    finally:
        assert serve.stop() == 0


def test_the_plain_tritonserver_command_serves(mixed_repository, tmp_path):
    """docs/operations.md's command line without trtpool-serve, as pasted in the checkout, on free ports (loopback
    only, and a region prefix of its own): tiny serves, the models that cannot load are not ready, and
    Ctrl-C stops it with 0 and no region left."""
    repo, broken = mixed_repository
    ports = Ports()
    prefix = f"{TEST_SHM_PREFIX}{uuid.uuid4().hex[:12]}_"
    command = command_argv(quoted_command(".triton/bin/tritonserver", OPERATIONS), {
        "/path/to/model_repository": str(repo), "--http-port=8000": f"--http-port={ports.http_port}",
        "--grpc-port=8001": f"--grpc-port={ports.grpc_port}", "--metrics-port=8002": f"--metrics-port={ports.metrics_port}"})
    assert "--load-model=*" in command
    assert {f"--{kind}-address=127.0.0.1" for kind in ("http", "grpc", "metrics")} <= set(command)  # as trtpool-serve
    server = ServeCommand([*command, f"--backend-config=python,shm-region-prefix-name={prefix}"], ports)
    try:
        server.wait_for("Started GRPCInferenceService", timeout=180)
        x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
        with grpcclient.InferenceServerClient(ports.grpc_url) as client:
            assert client.is_model_ready("tiny")
            assert not any(client.is_model_ready(model) for model in broken)
            y = client.infer("tiny", [grpc_input("INPUT0", x, "FP32")]).as_numpy("OUTPUT0")
        np.testing.assert_allclose(y, tiny_reference(x), **TINY_TOLERANCE)
    finally:
        assert server.stop() == 0, server.output()[-3000:]
    assert not sorted(SHM.glob(prefix + "*"))


def test_serve_sh_serves_a_repository_of_ones_own_without_examples(mixed_repository, tmp_path):
    """On the ports in HTTP_PORT, GRPC_PORT and METRICS_PORT, as the examples' form."""
    repo, broken = mixed_repository
    serve = serve_sh({"TRTPOOL_SERVER_LOG": str(tmp_path / "server.log")},
                     "--repo", str(repo), "--models", "tiny", "--watch-interval=0")
    try:
        serve.wait_for("[serve] ready:", timeout=300)
        assert "preparing example models" not in serve.output()
        command = serve.output().split("tritonserver command:")[1].splitlines()[0]
        assert f"--http-port={serve.ports.http_port}" in command
        assert f"--metrics-port={serve.ports.metrics_port}" in command
        with grpcclient.InferenceServerClient(serve.ports.grpc_url) as client:
            assert client.is_model_ready("tiny")
            assert not any(client.is_model_ready(model) for model in broken)
    finally:
        assert serve.stop() == 0


def test_trtpool_serve_finds_the_set_ups_tritonserver_with_none_on_path(mixed_repository, tmp_path):
    """A newcomer's shell: .venv/bin/trtpool-serve, no TRTPOOL_TRITONSERVER, no tritonserver on PATH, the log
    on the terminal (where, without a GPU, the messages docs/operations.md calls expected there are said to be)."""
    repo, _ = mixed_repository
    assert shutil.which("tritonserver", path=NEWCOMER_PATH) is None
    ports = Ports()
    serve = ServeCommand([str(TRTPOOL_SERVE), "--repo", str(repo), "--models", "tiny", "--watch-interval=0",
                          "--http-port", str(ports.http_port), "--grpc-port", str(ports.grpc_port),
                          "--metrics-port", str(ports.metrics_port)], ports,
                         env={"TRTPOOL_TRITONSERVER": None, "PATH": NEWCOMER_PATH})
    try:
        serve.wait_for("[serve] health", timeout=300)
        if current_gpu() is None:
            for message in ("CudaDriverHelper has not been initialized", "Failed to initialize NVML",
                            f"[serve] {NO_GPU_NOTE}"):
                assert message in serve.output()
        assert f"tritonserver command: {TRITONSERVER} " in serve.output()
        with grpcclient.InferenceServerClient(serve.ports.grpc_url) as client:
            assert client.is_model_ready("tiny")
        # The health line it prints runs as printed in that shell (trtpool-health is not on its PATH) ...
        [line] = [line for line in serve.lines if line.startswith("[serve] health")]
        printed = line.removeprefix("[serve] health").split("(a tiny request")[0]
        assert printed.split()[0] == str(TRTPOOL_SERVE.with_name("trtpool-health"))
        env = environment({"PATH": NEWCOMER_PATH})
        done = subprocess.run(shlex.split(printed), capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0 and "tiny: alive (answered)" in done.stdout, done
        # ... and pointed at the HTTP port, it says it wants the gRPC port.
        done = subprocess.run([*shlex.split(printed)[:2], serve.ports.http_url], capture_output=True, text=True,
                              timeout=60, env=env)
        assert done.returncode == 1
        assert (f"trtpool-health: {serve.ports.http_url} is tritonserver's HTTP port; trtpool-health speaks gRPC: "
                "give --url HOST:GRPC_PORT (trtpool-serve's --grpc-port, 8001 by default)") in done.stderr, done
    finally:
        assert serve.stop() == 0


def test_without_any_tritonserver_one_line_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("TRTPOOL_TRITONSERVER", raising=False)
    monkeypatch.setenv("PATH", NEWCOMER_PATH)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    with pytest.raises(ValueError) as refused:
        find_tritonserver(None)
    message = str(refused.value)
    assert "\n" not in message
    assert f"{tmp_path / '.triton' / 'bin' / 'tritonserver'} does not exist" in message
    assert "PATH has none" in message and "set TRTPOOL_TRITONSERVER=" in message
    (tmp_path / "model").mkdir()
    done = subprocess.run([str(TRTPOOL_SERVE), "--repo", str(tmp_path), "--tritonserver", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"trtpool-serve: error: --tritonserver is '{tmp_path / 'nowhere'}', "
                                   "which is not an executable file")


def test_a_mistyped_flag_shows_the_unrecognized_option_first(tmp_path):
    (tmp_path / "repo" / "model").mkdir(parents=True)
    serve = trtpool_serve(tmp_path / "repo", tmp_path / "server.log", "--watch-intreval", "1")
    assert serve.process.wait(120) == 1
    after_exit = serve.output().split("during start-up\n", 1)[1].splitlines()
    assert after_exit[0].endswith("tritonserver: unrecognized option '--watch-intreval'"), after_exit
    assert after_exit[1] == "(did you mean trtpool-serve's --watch-interval?)"
    assert "--trace-config" not in serve.output()    # not the usage text


def test_the_typo_hint_shows_on_the_terminal_too(tmp_path):
    """Without --log, tritonserver's output is the terminal's: its reason and the hint, no usage text."""
    (tmp_path / "repo" / "model").mkdir(parents=True)
    ports = Ports()
    serve = ServeCommand([str(TRTPOOL_SERVE), "--repo", str(tmp_path / "repo"), "--http-prot", "18420",
                          "--grpc-port", str(ports.grpc_port)], ports)
    assert serve.process.wait(120) == 1
    assert "(did you mean trtpool-serve's --http-port?)" in serve.lines, serve.output()
    assert "--trace-config" not in serve.output() and "Usage: tritonserver" not in serve.output()


@pytest.mark.parametrize("made", ["nothing", "a file", "an empty folder"])
def test_a_repository_without_models_is_refused_at_once_by_name(tmp_path, made):
    repo = tmp_path / "repo"
    if made == "a file":
        repo.write_text("")
    elif made == "an empty folder":
        (repo / ".git").mkdir(parents=True)   # hidden folders are no models
    done = subprocess.run([str(TRTPOOL_SERVE), "--repo", str(repo)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    why = {"nothing": "does not exist", "a file": "is not a folder", "an empty folder": "holds no model folder"}[made]
    assert done.stderr.startswith(f"trtpool-serve: error: --repo {repo}: {why}"), done.stderr


def test_a_start_that_fails_is_reported_at_once(mixed_repository, tmp_path):
    """tritonserver that cannot start (here a cache it cannot find) listens but never becomes live;
    trtpool-serve stops it and says why instead of waiting out --start-timeout, on the terminal
    and with --log (both with the note on the messages a machine without a GPU logs)."""
    repo, _ = mixed_repository
    for log in (None, tmp_path / "server.log"):
        ports = Ports()
        command = [str(TRTPOOL_SERVE), "--repo", str(repo), "--models", "tiny", "--watch-interval=0",
                   "--start-timeout=600", "--http-port", str(ports.http_port), "--grpc-port", str(ports.grpc_port),
                   "--metrics-port", str(ports.metrics_port), "--cache-config=local,size=1000",
                   *(["--log", str(log)] if log else [])]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                              env=environment({"TRTPOOL_TRITONSERVER": str(TRITONSERVER)}))
        assert done.returncode == 1
        assert "[serve] tritonserver listens but is not live: its start failed (below); stopping it" in done.stdout
        assert "unable to find 'libtritoncache_local.so' for cache" in done.stderr
        if log is None and current_gpu() is None:
            assert "Failed to initialize NVML" in done.stdout and f"[serve] {NO_GPU_NOTE}" in done.stdout
        if log is not None:
            assert "CudaDriverHelper has not been initialized" not in done.stdout
            assert "libtritoncache_local" in log.read_text()
        if log is not None and current_gpu() is None:   # the docs' promise holds with --log too
            assert "Failed to initialize NVML" in log.read_text()
            assert f"[serve] {NO_GPU_NOTE}; they are in {log}" in done.stdout.splitlines(), done.stdout


def test_help_describes_every_flag_with_its_default():
    done = subprocess.run([str(TRTPOOL_SERVE), "--help"], capture_output=True, text=True, timeout=60)
    options = done.stdout.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    entries = {block.split()[0].rstrip(","): " ".join(block.split())
               for block in re.split(r"\n(?=  -)", "\n" + options) if block.strip()}
    for action in parser()._actions:
        entry = entries[action.option_strings[0]]
        assert action.help and action.help.split()[0] in entry, entry
        if action.default not in (None, argparse.SUPPRESS) and action.default is not False and action.default != []:
            assert f"(default: {action.default})" in entry, entry
    assert "(default: 600.0)" in entries["--start-timeout"] and "(default: 10.0)" in entries["--probe-timeout"]
