"""Process files and their stages in-process, on the tiny example: what a user's
preprocess/postprocess may do wrong, and that each mistake fails its request alone."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.harness.server import process_state
from tests.unit.trtpool.modes.test_decoupled import RecordingResponder
from trtpool import parameters
from trtpool.errors import ConfigError, InvalidInput, ProcessError
from trtpool.instance import ModelInstance
from trtpool.model.config_pbtxt import auto_complete, check_agreement
from trtpool.modes.decoupled import Scheduler
from trtpool.process.file import engine_sections, load_process_file
from trtpool.runtimes.onnxruntime import OnnxRuntime
from trtpool_builder.examples import write_example
from trtpool_builder.examples.tiny import tiny_reference

# Outside face: VALUES float64 [16] in (a value -1 in row 0 is refused), TOTAL and DOUBLED out.
PROCESS = '''
import numpy as np

def setup(model_config, folder):
    global seen
    seen = (model_config["name"], (folder / "process.py").is_file())

def preprocess(inputs):
    values = inputs["VALUES"]
    if values[0, 0] == -1:
        raise ValueError("first value is -1")
    if values[0, 0] == -2:
        return {"INPUT0": values}                      # float64: not the engine's type
    return {"INPUT0": values.astype(np.float32)}

def postprocess(outputs, inputs):
    if inputs["VALUES"][0, 0] == -3:
        raise RuntimeError("cannot post")
    return {"TOTAL": outputs["OUTPUT0"].sum(axis=1, keepdims=True), "DOUBLED": outputs["OUTPUT0"] * 2}
'''
CONFIG = {
    "name": "tiny_staged", "max_batch_size": 8, "parameters": {"preprocess_threads": {"string_value": "2"},
                                                               "postprocess_threads": {"string_value": "2"}},
    "input": [{"name": "VALUES", "data_type": "TYPE_FP64", "dims": ["16"]}],
    "output": [{"name": "TOTAL", "data_type": "TYPE_FP32", "dims": ["1"]},
               {"name": "DOUBLED", "data_type": "TYPE_FP32", "dims": ["4"]}],
}


def staged_folder(tmp_path: Path, source: str = PROCESS) -> Path:
    version_dir = tmp_path / "1"
    version_dir.mkdir(exist_ok=True)
    write_example("tiny", version_dir / "model.onnx")
    (version_dir / "process.py").write_text(source)
    return version_dir


@pytest.fixture
def instance(tmp_path: Path):
    instance = ModelInstance(CONFIG, staged_folder(tmp_path), "cpu")
    yield instance
    instance.close()


def values(first: float, seed: int) -> np.ndarray:
    row = np.random.default_rng(seed).standard_normal((1, 16))
    row[0, 0] = first
    return row


def answered(responders: list[RecordingResponder]) -> list[RecordingResponder]:
    for responder in responders:
        assert responder.answered.wait(30), "a request was never answered"
    return responders


def test_each_request_is_answered_alone_whatever_its_process_functions_do(instance):
    firsts = [0.5, -1.0, 0.25, -2.0, -3.0, 0.75]
    requests = [{"VALUES": values(first, seed)} for seed, first in enumerate(firsts)]
    responders = [RecordingResponder(cancelled=False) for _ in requests]
    tensors, answering = instance.stage.before(requests, responders)
    assert len(tensors) == 4  # -1 refused, -2 returned the wrong type
    instance.runner.run(tensors, answering, detach=True)
    outcomes = [r.outcome for r in answered(responders)]

    assert outcomes[1] == ("failed: InvalidInput: input 'VALUES': process.py preprocess() refused it: "
                           "ValueError: first value is -1")
    assert outcomes[3] == ("failed: ProcessError: process.py preprocess() returned what the engine cannot take: "
                           "input 'INPUT0': data type FP64 given, expected FP32")
    assert outcomes[4] == "failed: ProcessError: process.py postprocess() raised RuntimeError: cannot post"
    for index in (0, 2, 5):
        expected = tiny_reference(requests[index]["VALUES"].astype(np.float32))
        sent = responders[index].outputs
        np.testing.assert_allclose(sent["DOUBLED"], expected * 2, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(sent["TOTAL"], expected.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
        assert sent["DOUBLED"].dtype == np.float32


def test_decoupled_requests_are_preprocessed_then_queued(instance):
    scheduler = Scheduler(instance.runner, max_queue=16, batch_wait_us=1000, cancel_check_after_us=10_000)
    try:
        requests = [{"VALUES": values(first, seed)} for seed, first in enumerate([0.1, -1.0, 0.2, 0.3])]
        responders = [RecordingResponder(cancelled=False) for _ in requests]
        for request, responder in zip(requests, responders):
            instance.stage.before_each(request, responder, scheduler.submit)
        answered(responders)
    finally:
        scheduler.close()
    assert responders[1].outcome.startswith("failed: InvalidInput: input 'VALUES'")
    for index in (0, 2, 3):
        expected = tiny_reference(requests[index]["VALUES"].astype(np.float32))
        np.testing.assert_allclose(responders[index].outputs["DOUBLED"], expected * 2, rtol=1e-5, atol=1e-5)


def test_postprocess_must_return_the_declared_outputs_in_their_types(tmp_path):
    wrong = PROCESS.replace('"DOUBLED": outputs["OUTPUT0"] * 2', '"DOUBLED": outputs["OUTPUT0"] * 2.0 + np.zeros(1)')
    instance = ModelInstance(CONFIG, staged_folder(tmp_path, wrong), "cpu")
    try:
        with pytest.raises(ProcessError, match=r"postprocess\(\) returned output 'DOUBLED' as float64, "
                                               r"config.pbtxt declares TYPE_FP32"):
            instance.stage.post.postprocess({"OUTPUT0": np.ones((1, 4), np.float32)}, {"VALUES": values(0, 0)})
        missing = PROCESS.replace(', "DOUBLED": outputs["OUTPUT0"] * 2', "")
        (tmp_path / "1" / "process.py").write_text(missing)
        stage = ModelInstance(CONFIG, tmp_path / "1", "cpu")
        try:
            with pytest.raises(ProcessError, match=r"returned \['TOTAL'\], expected .*\['DOUBLED', 'TOTAL'\]"):
                stage.stage.post.postprocess({"OUTPUT0": np.ones((1, 4), np.float32)}, {"VALUES": values(0, 0)})
        finally:
            stage.close()
    finally:
        instance.close()


def test_a_preprocess_that_exits_fails_its_request_and_the_workers_go_on(tmp_path):
    exiting = PROCESS.replace('raise ValueError("first value is -1")', "raise SystemExit(3)")
    instance = ModelInstance(CONFIG, staged_folder(tmp_path, exiting), "cpu")
    try:
        requests = [{"VALUES": values(first, seed)} for seed, first in enumerate([-1.0, 0.5])]
        responders = [RecordingResponder(cancelled=False) for _ in requests]
        tensors, answering = instance.stage.before(requests, responders)
        instance.runner.run(tensors, answering, detach=True)
        answered(responders)
        assert responders[0].outcome == "failed: InvalidInput: input 'VALUES': process.py preprocess() refused it: SystemExit: 3"
        assert responders[1].outcome == "sent"
        # The preprocess workers (two threads) serve on: two more requests are answered normally.
        after = [{"VALUES": values(first, seed)} for seed, first in enumerate([0.25, 0.75], start=2)]
        answers = [RecordingResponder(cancelled=False) for _ in after]
        tensors, answering = instance.stage.before(after, answers)
        instance.runner.run(tensors, answering, detach=True)
        for request, responder in zip(after, answered(answers)):
            assert responder.outcome == "sent"
            expected = tiny_reference(request["VALUES"].astype(np.float32))
            np.testing.assert_allclose(responder.outputs["DOUBLED"], expected * 2, rtol=1e-5, atol=1e-5)
    finally:
        instance.close()


def test_the_outside_face_is_accepted_only_with_a_process_file(tmp_path):
    version_dir = staged_folder(tmp_path)
    faces = engine_sections(version_dir)
    assert faces == ()
    process = load_process_file(version_dir, CONFIG)
    signature = ModelInstance(CONFIG, version_dir, "cpu")
    try:
        check_agreement(CONFIG, signature.runtime.signature, process.engine_sections)
        with pytest.raises(ConfigError, match=r"input 'VALUES': not in the model, which has \['INPUT0'\]"):
            check_agreement(CONFIG, signature.runtime.signature)
        bare = {"name": "tiny_staged", "max_batch_size": 0}
        with pytest.raises(ConfigError, match=r"input: config.pbtxt declares none, and with a process file"):
            auto_complete(bare, signature.runtime.signature, faces)
        only_post = "def postprocess(outputs, inputs):\n    return outputs\n"
        (version_dir / "process.py").write_text(only_post)
        added = auto_complete({**bare, "output": CONFIG["output"]}, signature.runtime.signature, ("input",))
        assert [entry["name"] for entry in added["input"]] == ["INPUT0"] and engine_sections(version_dir) == ("input",)
    finally:
        signature.close()


@pytest.mark.parametrize("source", [
    "def _post(outputs, inputs):\n    return outputs\npostprocess = _post\n",
    "from functools import partial\npostprocess = partial(lambda scale, outputs, inputs: outputs, 1)\n",
    "from operator import getitem as postprocess\n",
])
def test_auto_complete_sees_the_functions_the_load_sees(tmp_path, source):
    """Bound without a def at the top level: auto-complete's faces agree with the loaded module's."""
    version_dir = staged_folder(tmp_path, source)
    process = load_process_file(version_dir, CONFIG)
    assert process.postprocess is not None and process.preprocess is None
    assert engine_sections(version_dir) == process.engine_sections == ("input",)


@pytest.mark.parametrize("source, message", [
    ("x = 1\n", r"defines none of preprocess\(inputs\), postprocess\(outputs, inputs\), preprocess_batch"),
    ("preprocess = 3\n", r"'preprocess' is a int, expected a function"),
    ("import no_such_module_here\n", r"importing it raised ModuleNotFoundError"),
    ("def setup(config, folder):\n    open(folder / 'labels.txt')\ndef preprocess(inputs):\n    return inputs\n",
     r"setup\(model_config, folder\) raised FileNotFoundError"),
])
def test_a_broken_process_file_stops_the_model_loading_with_the_reason(tmp_path, source, message):
    with pytest.raises(ConfigError, match=message):
        ModelInstance(CONFIG, staged_folder(tmp_path, source), "cpu")


def test_setup_gets_the_model_config_and_its_folder(tmp_path):
    version_dir = staged_folder(tmp_path)
    process = load_process_file(version_dir, CONFIG)
    module_globals = process.preprocess.__globals__
    assert module_globals["seen"] == ("tiny_staged", True)
    assert isinstance(process.preprocess({"VALUES": values(0.5, 1)})["INPUT0"], np.ndarray)
    instance = ModelInstance(CONFIG, version_dir, "cpu")
    try:
        with pytest.raises(InvalidInput):
            instance.stage.pre.preprocess({"VALUES": values(-1.0, 1)})
    finally:
        instance.close()


def test_stage_threads_are_read_with_the_other_parameters(tmp_path):
    def threads(**values: str) -> tuple[int | None, int]:
        cfg = parameters.load({"name": "x", "parameters": {k: {"string_value": v} for k, v in values.items()}},
                               tmp_path, "cpu")
        return cfg.preprocess_threads, cfg.postprocess_threads

    assert threads() == (None, parameters.stage_threads())  # preprocess auto: decided with the faces
    assert threads(preprocess_threads="3", postprocess_threads="auto") == (3, parameters.stage_threads())
    with pytest.raises(ConfigError, match=r"parameter 'postprocess_threads': 0 is too small; expected a whole "
                                          r"number from 1 to 64"):
        threads(postprocess_threads="0")


PROCESSES = {**CONFIG, "parameters": {**CONFIG["parameters"], "preprocess_processes": {"string_value": "2"}}}
# The same functions, and a request whose first value is -4 ends its worker process.
PROCESS_IN_WORKERS = PROCESS.replace('''    if values[0, 0] == -2:''', '''    if values[0, 0] == -4:
        import os
        os._exit(7)
    if values[0, 0] == -5:
        raise TwoArguments("first value", -5)
    if values[0, 0] == -2:''') + '''

class TwoArguments(Exception):  # pickled as (cls, args) it cannot be made again: args has one item
    def __init__(self, what, value):
        super().__init__(f"{what} is {value}")
'''


def test_preprocess_in_worker_processes_answers_as_on_threads(tmp_path):
    """preprocess_processes: the same answers and errors as the threads give, from
    preprocess run in other processes; a worker that dies fails its request, and the
    pool is made anew for the next."""
    instance = ModelInstance(PROCESSES, staged_folder(tmp_path, PROCESS_IN_WORKERS), "cpu")
    try:
        assert instance.pre_processes is not None
        firsts = [0.5, -1.0, 0.25, -2.0]
        requests = [{"VALUES": values(first, seed)} for seed, first in enumerate(firsts)]
        responders = [RecordingResponder(cancelled=False) for _ in requests]
        tensors, answering = instance.stage.before(requests, responders)
        instance.runner.run(tensors, answering, detach=True)
        outcomes = [r.outcome for r in answered(responders)]
        assert outcomes[1] == ("failed: InvalidInput: input 'VALUES': process.py preprocess() refused it: "
                               "ValueError: first value is -1")
        assert outcomes[3].startswith("failed: ProcessError: process.py preprocess() returned what the engine "
                                      "cannot take: input 'INPUT0': data type FP64 given")
        for index in (0, 2):
            expected = tiny_reference(requests[index]["VALUES"].astype(np.float32))
            np.testing.assert_allclose(responders[index].outputs["DOUBLED"], expected * 2, rtol=1e-5, atol=1e-5)

        with pytest.raises(ProcessError, match=r"a preprocess worker process died .* started again: retry"):
            instance.stage.pre.preprocess({"VALUES": values(-4.0, 1)})
        after = instance.stage.pre.preprocess({"VALUES": values(0.5, 1)})
        np.testing.assert_array_equal(after["INPUT0"], values(0.5, 1).astype(np.float32))
    finally:
        instance.close()


def test_an_exception_the_stub_cannot_unpickle_fails_its_request_and_not_the_pool(tmp_path):
    instance = ModelInstance(PROCESSES, staged_folder(tmp_path, PROCESS_IN_WORKERS), "cpu")
    try:
        pool = instance.pre_processes._pool
        with pytest.raises(InvalidInput, match=r"refused it: RuntimeError: TwoArguments: first value is -5"):
            instance.stage.pre.preprocess({"VALUES": values(-5.0, 1)})
        after = instance.stage.pre.preprocess({"VALUES": values(0.5, 1)})
        np.testing.assert_array_equal(after["INPUT0"], values(0.5, 1).astype(np.float32))
        assert instance.pre_processes._pool is pool, "the pool was broken and made again"
    finally:
        instance.close()


def test_postprocessing_handed_over_after_close_pre_is_still_answered(instance):
    """The pipelined handler's shutdown: close_pre, then the pipeline's last batches
    finish and hand their outputs to the post workers, which the stage's close ends."""
    instance.stage.close_pre()
    request = {"VALUES": values(0.5, 3)}
    responder = RecordingResponder(cancelled=False)
    engine_inputs = instance.stage.pre.preprocess(request)
    outputs = {"OUTPUT0": tiny_reference(engine_inputs["INPUT0"]).astype(np.float32)}
    instance.stage.post.answering([responder], [request])[0].send(outputs)
    answered([responder])
    np.testing.assert_allclose(responder.outputs["DOUBLED"], outputs["OUTPUT0"] * 2, rtol=1e-6)


def test_preprocess_runs_in_the_workers_not_the_instance(tmp_path):
    reporting = PROCESS + '''
import os

def preprocess(inputs):
    return {"INPUT0": np.full(inputs["VALUES"].shape, os.getpid(), np.float32)}
'''
    instance = ModelInstance(PROCESSES, staged_folder(tmp_path, reporting), "cpu")
    try:
        pids = {int(instance.stage.pre.preprocess({"VALUES": values(0.5, s)})["INPUT0"][0, 0]) for s in range(8)}
        assert os.getpid() not in pids and 1 <= len(pids) <= 2
    finally:
        instance.close()


def test_worker_processes_that_cannot_start_stop_the_load(tmp_path):
    failing = PROCESS.replace('''    seen = (model_config["name"], (folder / "process.py").is_file())''',
                              '''    seen = (model_config["name"], (folder / "process.py").is_file())
    import multiprocessing
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("no labels in the worker")''')
    with pytest.raises(ConfigError, match=r"parameter 'preprocess_processes': the worker processes did not start"):
        ModelInstance(PROCESSES, staged_folder(tmp_path, failing), "cpu")


def test_preprocess_processes_is_read_with_the_other_parameters(tmp_path):
    def processes(value: str) -> int:
        cfg = parameters.load({"name": "x", "parameters": {"preprocess_processes": {"string_value": value}}},
                               tmp_path, "cpu")
        return cfg.preprocess_processes

    assert processes("") == 0 and processes("4") == 4
    with pytest.raises(ConfigError, match=r"parameter 'preprocess_processes': 65 is too large; expected a whole "
                                          r"number from 0 to 64"):
        processes("65")


def test_decoupled_preprocessing_is_bounded_by_max_queue_size(tmp_path):
    """Decoupled requests wait for a pre worker before they reach the queue: no more than
    max_queue_size of them at once; the others are refused as a full queue refuses them,
    and those admitted are answered."""
    gated = PROCESS + '''
import threading
gate = threading.Event()
_plain = preprocess

def preprocess(inputs):
    gate.wait(30)
    return _plain(inputs)
'''
    config = {**CONFIG, "parameters": {**CONFIG["parameters"], "max_queue_size": {"string_value": "3"}}}
    instance = ModelInstance(config, staged_folder(tmp_path, gated), "cpu")
    scheduler = Scheduler(instance.runner, max_queue=16, batch_wait_us=1000, cancel_check_after_us=10_000)
    try:
        requests = [{"VALUES": values(0.5, seed)} for seed in range(5)]
        responders = [RecordingResponder(cancelled=False) for _ in requests]
        for request, responder in zip(requests, responders):
            instance.stage.before_each(request, responder, scheduler.submit)
        for refused in responders[3:]:
            assert refused.answered.is_set()
            assert refused.outcome == ("failed: Overloaded: overloaded: 3 requests are being preprocessed or wait "
                                       "for it (max_queue_size 3); retry later")
        instance.stage.process.preprocess.__globals__["gate"].set()
        for index, responder in enumerate(answered(responders[:3])):
            expected = tiny_reference(requests[index]["VALUES"].astype(np.float32))
            np.testing.assert_allclose(responder.outputs["DOUBLED"], expected * 2, rtol=1e-5, atol=1e-5)
        after = RecordingResponder(cancelled=False)
        instance.stage.before_each({"VALUES": values(0.5, 9)}, after, scheduler.submit)
        assert answered([after])[0].outcome == "sent"
    finally:
        scheduler.close()
        instance.close()


def test_worker_processes_end_when_their_parent_is_killed(tmp_path):
    """A stub killed with its workers blocked on their queue (the watchdog then reloads
    the model): the workers end too instead of living on beside the new stub."""
    version_dir = staged_folder(tmp_path)
    script = (f"import sys, json; sys.path[:0] = {sys.path!r}\n"
              "from pathlib import Path\n"
              "from trtpool.process.workers import ProcessPreprocess\n"
              f"pool = ProcessPreprocess(Path({str(version_dir)!r}), {CONFIG!r}, 2)\n"
              "print(json.dumps(list(pool._pool._processes)), flush=True)\n"
              "import time; time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        workers = json.loads(parent.stdout.readline())
        assert len(workers) >= 1 and all(map(running, workers))
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while any(map(running, workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in workers if running(pid)]


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie waits only to be reaped)."""
    state = process_state(pid)
    return state is not None and state[0] != "Z"


# The same outside face through the batch faces: one call per batch, an entry per request.
BATCH_PROCESS = '''
import numpy as np

def setup(model_config, folder):
    global calls
    calls = []

def preprocess_batch(batch, device):
    calls.append((len(batch), device))
    firsts = [inputs["VALUES"][0, 0] for inputs in batch]
    if -4 in firsts:
        raise RuntimeError("the whole call breaks on -4")
    entries = []
    for first, inputs in zip(firsts, batch):
        if first == -1:
            entries.append(ValueError("first value is -1"))
        elif first == -2:
            entries.append({"INPUT0": inputs["VALUES"]})             # float64: not the engine's type
        else:
            entries.append({"INPUT0": inputs["VALUES"].astype(np.float32)})
    return entries

def postprocess_batch(outputs, batch):
    calls.append(("post", len(outputs)))
    answers = []
    for out, inputs in zip(outputs, batch):
        if inputs["VALUES"][0, 0] == -3:
            answers.append(RuntimeError("cannot post"))
        else:
            answers.append({"TOTAL": out["OUTPUT0"].sum(axis=1, keepdims=True), "DOUBLED": out["OUTPUT0"] * 2})
    return answers
'''


def batch_instance(tmp_path: Path, source: str = BATCH_PROCESS, **parameters: str) -> ModelInstance:
    config = {**CONFIG, "parameters": {**CONFIG["parameters"],
                                       **{k: {"string_value": v} for k, v in parameters.items()}}}
    return ModelInstance(config, staged_folder(tmp_path, source), "cpu")


def run_staged(instance: ModelInstance, requests: list[dict]) -> list[RecordingResponder]:
    responders = [RecordingResponder(cancelled=False) for _ in requests]
    tensors, answering = instance.stage.before(requests, responders)
    instance.runner.run(tensors, answering, detach=True)
    return answered(responders)


def calls_of(instance: ModelInstance) -> list:
    return instance.stage.process.preprocess_batch.__globals__["calls"]


def test_batch_faces_take_the_batch_in_one_call_and_answer_each_request_alone(tmp_path):
    instance = batch_instance(tmp_path)
    try:
        firsts = [0.5, -1.0, 0.25, -2.0, -3.0, 0.75]
        requests = [{"VALUES": values(first, seed)} for seed, first in enumerate(firsts)]
        outcomes = [r.outcome for r in run_staged(instance, requests)]
        assert calls_of(instance) == [(6, "cpu"), ("post", 4)]  # one call each way; post for the 4 run
        assert outcomes[1] == ("failed: InvalidInput: input 'VALUES': process.py preprocess_batch() refused it: "
                               "ValueError: first value is -1")
        assert outcomes[3] == ("failed: ProcessError: process.py preprocess_batch() returned what the engine "
                               "cannot take: input 'INPUT0': data type FP64 given, expected FP32")
        assert outcomes[4] == ("failed: ProcessError: process.py postprocess_batch() failed the request: "
                               "RuntimeError: cannot post")
        assert [outcomes[i] for i in (0, 2, 5)] == ["sent"] * 3
    finally:
        instance.close()


def test_a_batch_call_that_raises_is_retried_per_request_so_only_its_culprit_fails(tmp_path):
    instance = batch_instance(tmp_path)
    try:
        requests = [{"VALUES": values(first, seed)} for seed, first in enumerate([0.5, -4.0, 0.25])]
        responders = run_staged(instance, requests)
        assert calls_of(instance)[:4] == [(3, "cpu"), (1, "cpu"), (1, "cpu"), (1, "cpu")]
        assert responders[1].outcome == ("failed: InvalidInput: input 'VALUES': process.py preprocess_batch() "
                                         "refused it: RuntimeError: the whole call breaks on -4")
        for index in (0, 2):
            expected = tiny_reference(requests[index]["VALUES"].astype(np.float32))
            np.testing.assert_allclose(responders[index].outputs["DOUBLED"], expected * 2, rtol=1e-5, atol=1e-5)
    finally:
        instance.close()


@pytest.mark.parametrize("returned, says", [
    ("entries[:-1]", r"returned 2 entries, expected a list of 3 \(one per request"),
    ("None", r"returned a NoneType, expected a list of 3"),
])
def test_a_batch_face_returning_the_wrong_count_fails_those_requests_by_name(tmp_path, returned, says):
    source = BATCH_PROCESS.replace("    return entries\n", f"    return {returned} if len(batch) == 3 else entries\n")
    instance = batch_instance(tmp_path, source)
    try:
        responders = run_staged(instance, [{"VALUES": values(0.5, seed)} for seed in range(3)])
        # The call is made again per request (then it returns rightly): every request answered.
        assert [r.outcome for r in responders] == ["sent"] * 3
        assert calls_of(instance)[:4] == [(3, "cpu"), (1, "cpu"), (1, "cpu"), (1, "cpu")]
        lone = instance.stage.pre._call_batch_face([{"VALUES": values(0.5, 9)}] * 3)
        assert isinstance(lone, ProcessError) and re.search(says, str(lone)), lone
    finally:
        instance.close()


def test_batch_faces_are_engine_faces_read_without_running_the_file(tmp_path):
    version_dir = staged_folder(tmp_path, BATCH_PROCESS)
    assert engine_sections(version_dir) == ()
    (version_dir / "process.py").write_text("def postprocess_batch(outputs, batch):\n    return outputs\n")
    assert engine_sections(version_dir) == ("input",)


def test_auto_preprocess_threads_are_one_per_context_for_the_batch_face(tmp_path):
    batch = batch_instance(tmp_path, process_faces="batch", contexts="3", preprocess_threads="auto")
    try:
        assert batch.stage._pre._max_workers == batch.pool.size == 3
    finally:
        batch.close()
    (tmp_path / "request").mkdir()
    request = batch_instance(tmp_path / "request", PROCESS, contexts="3", preprocess_threads="auto")
    try:
        assert request.stage._pre._max_workers == parameters.stage_threads()
    finally:
        request.close()


def test_preprocess_processes_with_the_batch_face_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"parameter 'preprocess_processes': 2 worker processes run "
                                          r"preprocess\(inputs\), but this instance serves process.py's "
                                          r"preprocess_batch \(parameter 'process_faces' is 'batch' on cpu\)"):
        batch_instance(tmp_path, BATCH_PROCESS, process_faces="batch", preprocess_processes="2")


def test_process_faces_takes_only_its_choices():
    with pytest.raises(ConfigError, match=r"parameter 'process_faces'.*auto, request, batch"):
        parameters.load({**CONFIG, "parameters": {"process_faces": {"string_value": "gpu"}}}, Path("."), "cpu")


class OnDevice:
    """Stands in for a torch tensor on a GPU (torch and CUDA do not run here): rows slice,
    np.asarray refuses it as numpy refuses a CUDA tensor, `.host` is what a copy would give."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.shape = host.shape
        self.dtype = host.dtype

    def __len__(self) -> int:
        return len(self.host)

    def __getitem__(self, rows: slice) -> OnDevice:
        return OnDevice(self.host[rows])

    def split(self, sections: list[int]) -> tuple[OnDevice, ...]:
        """torch.Tensor.split with a list: views of consecutive rows, one per section, which must
        add up to the rows (torch raises otherwise)."""
        if sum(sections) != len(self.host):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {len(self.host)}")
        bounds = np.cumsum([0, *sections])
        return tuple(OnDevice(self.host[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True))

    def __array__(self, *args, **kwargs):
        raise TypeError("can't convert a device tensor to numpy")


class DeviceOutputsRuntime(OnnxRuntime):
    """ONNX Runtime whose contexts hand their outputs over as OnDevice, once asked to (as the
    torch runtime clones its outputs on the device instead of copying them to the host)."""

    def keep_outputs_on_device(self) -> bool:
        self.outputs_on_device = True
        return True

    def create_context(self, index):
        context = super().create_context(index)
        complete = context.complete

        def on_device():
            outputs = complete()
            return {n: OnDevice(np.array(a)) for n, a in outputs.items()} if self.outputs_on_device else outputs
        context.complete = on_device
        return context


DEVICE_POST = BATCH_PROCESS.replace("def postprocess_batch(outputs, batch):\n", '''OUTPUTS_ON_DEVICE = True

def postprocess_batch(outputs, batch):
    calls.append(("got", sorted({type(out["OUTPUT0"]).__name__ for out in outputs})))
    outputs = [{"OUTPUT0": getattr(out["OUTPUT0"], "host", out["OUTPUT0"])} for out in outputs]
''')


def test_outputs_on_device_is_read_after_setup_and_must_be_a_bool(tmp_path):
    folder = staged_folder(tmp_path, "def setup(config, folder):\n    global OUTPUTS_ON_DEVICE\n"
                                     "    OUTPUTS_ON_DEVICE = True\n\n"
                                     "def postprocess_batch(outputs, batch):\n    return outputs\n")
    assert load_process_file(folder, CONFIG).outputs_on_device is True
    (folder / "process.py").write_text("OUTPUTS_ON_DEVICE = 'yes'\n\ndef postprocess_batch(outputs, batch):\n"
                                       "    return outputs\n")
    with pytest.raises(ConfigError, match=r"process.py: OUTPUTS_ON_DEVICE is 'yes', expected True or False"):
        load_process_file(folder, CONFIG)


@pytest.mark.parametrize("runtime, handed", [(OnnxRuntime, "ndarray"), (DeviceOutputsRuntime, "OnDevice")])
def test_postprocess_batch_gets_device_outputs_where_the_runtime_keeps_them(tmp_path, monkeypatch, caplog,
                                                                          runtime, handed):
    """Asked by OUTPUTS_ON_DEVICE: the outputs stay the runtime's device tensors through the runner
    (sliced per request, never copied to numpy) where it can; host arrays where it cannot."""
    monkeypatch.setattr("trtpool.instance.load_runtime", lambda cfg: runtime(cfg, cfg.version_dir / "model.onnx"))
    caplog.set_level("INFO", logger="trtpool")
    instance = batch_instance(tmp_path, DEVICE_POST, process_faces="batch")
    try:
        requests = [{"VALUES": values(first, seed)} for seed, first in enumerate([0.5, 0.25, -1.0, 0.75])]
        responders = run_staged(instance, requests)
        assert [c for c in calls_of(instance) if c[0] == "got"] == [("got", [handed])]  # one call, for 3
        assert [r.outcome for r in responders] == ["sent", "sent", responders[2].outcome, "sent"]
        for index in (0, 1, 3):
            expected = tiny_reference(requests[index]["VALUES"].astype(np.float32))
            np.testing.assert_allclose(responders[index].outputs["DOUBLED"], expected * 2, rtol=1e-5, atol=1e-5)
        where = "on the device" if handed == "OnDevice" else "on the host (the onnxruntime runtime copies them there)"
        assert f"postprocess_batch takes the engine's outputs {where}" in caplog.text
    finally:
        instance.close()
