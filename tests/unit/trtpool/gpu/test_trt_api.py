"""trtpool.gpu.trt_api over the TensorRT double (module selection, the process logger, the
translation of each binding's failure, feature detection). What the real tensorrt_rtx
module confirms is in tests/unit/trtpool/runtimes/test_tensorrt_real_module.py."""
from __future__ import annotations

import logging
import sys
import threading
import types

import pytest

from tests.doubles.cuda_double import FakeCudart
from tests.doubles.tensorrt_double import make_module
from trtpool.errors import ContextFailure, EngineError, InvalidInput
from trtpool.gpu import trt_api


@pytest.fixture
def trt():
    return make_module(FakeCudart(), "tensorrt", "10.16.1.11")


def log_error(trt, message: str) -> None:
    trt_api.process_logger(trt).log(trt.ILogger.Severity.ERROR, message)


# ---- module selection -------------------------------------------------------------------------

def test_module_selection(monkeypatch):
    fake = FakeCudart()
    tensorrt, rtx = make_module(fake, "tensorrt"), make_module(fake, "tensorrt_rtx", "1.7.1.116")
    monkeypatch.setitem(sys.modules, "tensorrt", tensorrt)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", rtx)
    assert trt_api.import_tensorrt(None) is tensorrt
    assert trt_api.import_tensorrt("tensorrt_rtx") is rtx
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt now raises ImportError
    assert trt_api.import_tensorrt(None) is rtx
    with pytest.raises(EngineError, match="cannot import tensorrt "):
        trt_api.import_tensorrt("tensorrt")  # asked for explicitly: no fallback
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    with pytest.raises(EngineError) as neither:
        trt_api.import_tensorrt(None)
    message = str(neither.value)
    assert "cannot import tensorrt or tensorrt_rtx" in message
    assert "pip install --extra-index-url https://pypi.nvidia.com tensorrt-cu12" in message
    assert "nvcr.io/nvidia/tritonserver" in message and "pip install tensorrt-rtx-cu13" in message


@pytest.mark.parametrize("name, version, safe", [("tensorrt", "10.0.1", False), ("tensorrt", "10.12.0.36", False),
                                                 ("tensorrt", "10.13.0.35", True), ("tensorrt", "11.4.0.106", True),
                                                 ("tensorrt_rtx", "1.7.1.116", True)])
def test_where_infer_shapes_raises_safely(name, version, safe):
    assert trt_api.raises_safely(make_module(FakeCudart(), name, version)) is safe


# ---- the process logger ----------------------------------------------------------------------------

def test_one_logger_per_module_and_process(trt):
    logger = trt_api.process_logger(trt)
    assert isinstance(logger, trt.ILogger) and trt_api.process_logger(trt) is logger
    assert trt_api.process_logger(make_module(FakeCudart())) is not logger


def test_severities_reach_trtpools_log_at_their_level(trt, caplog):
    caplog.set_level(logging.DEBUG, logger="trtpool")
    logger, severity = trt_api.process_logger(trt), trt.ILogger.Severity
    for level in severity:
        logger.log(level, f"a {level.name} message")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "tensorrt: a INTERNAL_ERROR message"), (logging.ERROR, "tensorrt: a ERROR message"),
        (logging.WARNING, "tensorrt: a WARNING message"), (logging.DEBUG, "tensorrt: a INFO message")]


def test_errors_are_kept_per_thread_and_per_block(trt):
    barrier = threading.Barrier(2)
    seen: dict[int, list[str]] = {}

    def work(index: int) -> None:
        with trt_api.tensorrt_errors() as errors:
            log_error(trt, f"error {index}")
            barrier.wait(timeout=5)  # both logged before either block ends
        seen[index] = errors

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {0: ["error 0"], 1: ["error 1"]}
    with trt_api.tensorrt_errors() as outer:
        log_error(trt, "before")
        with trt_api.tensorrt_errors() as inner:
            log_error(trt, "inside")
    assert (outer, inner) == (["before", "inside"], ["inside"])
    log_error(trt, "outside any block")  # logged, kept nowhere


def test_a_messages_block_takes_the_threads_messages_from_the_log_and_errors_still_count(trt, caplog):
    """trtpool-build prints TensorRT's log itself; a profile TensorRT-RTX only warns about counts."""
    caplog.set_level(logging.DEBUG, logger="trtpool")
    logger, severity = trt_api.process_logger(trt), trt.ILogger.Severity
    shown: list[tuple[str, str]] = []
    with trt_api.tensorrt_messages(lambda level, message: shown.append((level.name, message))):
        with trt_api.tensorrt_errors(counting="not self-consistent") as errors:
            for level in severity:
                logger.log(level, f"a {level.name} message")
            logger.log(severity.WARNING, "profile values are not self-consistent")
    assert shown == [(level.name, f"a {level.name} message") for level in severity] + [
        ("WARNING", "profile values are not self-consistent")]
    assert errors == ["a INTERNAL_ERROR message", "a ERROR message", "profile values are not self-consistent"]
    assert not caplog.records
    log_error(trt, "after the block")
    assert [r.getMessage() for r in caplog.records] == ["tensorrt: after the block"]


def test_a_missing_module_says_why_per_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    with pytest.raises(trt_api.TensorRTMissing) as missing:
        trt_api.import_tensorrt(None)
    assert list(missing.value.failures) == list(trt_api.MODULES)
    assert all(isinstance(exc, ImportError) for exc in missing.value.failures.values())


# ---- calls ---------------------------------------------------------------------------------------

def test_call_turns_each_kind_of_failure_into_the_asked_error_with_tensorrts_words(trt):
    def refusing() -> bool:
        log_error(trt, "Error Code 3: API Usage Error (refused)")
        return False

    def raising() -> None:
        log_error(trt, "Error Code 7: Internal Error (cannot infer)")
        raise RuntimeError("infer_shapes error code: -1")

    with pytest.raises(InvalidInput) as refused:
        trt_api.call("input 'x'", refusing, failure=InvalidInput)
    assert str(refused.value) == "input 'x': Error Code 3: API Usage Error (refused)"
    with pytest.raises(ContextFailure) as raised:
        trt_api.call("inferring", raising, failure=ContextFailure)
    assert str(raised.value) == ("inferring: Error Code 7: Internal Error (cannot infer) "
                                 "(RuntimeError: infer_shapes error code: -1)")
    assert isinstance(raised.value.__cause__, RuntimeError)
    with pytest.raises(EngineError, match="making a context: \\(TensorRT logged no error\\)"):
        trt_api.call("making a context", lambda: None, failure=EngineError)
    assert trt_api.call("infer_shapes", lambda: [], failure=InvalidInput) == []  # an empty list is success


def test_activation_bytes_by_release():
    """10.0 has device_memory_size only; 10.1-10.x both (v2 is right); 11.x and RTX v2 only."""
    assert trt_api.activation_bytes(types.SimpleNamespace(device_memory_size=10)) == 10
    assert trt_api.activation_bytes(types.SimpleNamespace(device_memory_size=10, device_memory_size_v2=20)) == 20
    assert trt_api.activation_bytes(types.SimpleNamespace(device_memory_size_v2=20)) == 20


def test_an_output_allocator_failure_is_logged_and_kept_for_the_call(trt, caplog):
    def allocate(name: str, size: int) -> int:
        raise MemoryError("no room")

    allocator = trt_api.output_allocator(trt, allocate, lambda name, shape: None)
    assert isinstance(allocator, trt.IOutputAllocator)
    with trt_api.tensorrt_errors() as errors:
        assert allocator.reallocate_output_async("boxes", 0, 4096, 256, 1) == 0
    assert errors == ["allocating 4096 bytes for output 'boxes' failed: no room"]
    assert "allocating 4096 bytes for output 'boxes' failed" in caplog.text
