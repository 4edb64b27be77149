"""TensorRT's lean runtime as trtpool's TensorRT runtime: a runtime-only install (`tensorrt_lean`,
or its bindings wheel's own name `tensorrt_lean_bindings`) serves version-compatible engines where
the full `tensorrt` is not installed, and refuses any other engine by name.

Over the doubles (the lean double is held to the real lean module's classes by
tests/unit/doubles/test_tensorrt_double.py): the module choice, a version-compatible engine served and answered
as float64 numpy computes it, the refusals. Against the real lean module (installed by
scripts/setup.sh in its own folder, imported in a subprocess: a TensorRT Runtime that could not
be made is a null pointer that crashes its process when used): on this machine without CUDA,
runtime creation is an EngineError with TensorRT's own words, not a crash.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.doubles.cuda_double import FakeCudart
from tests.doubles.tensorrt_double import make_module
from tests.harness.server import ROOT
from tests.unit.doubles.test_tensorrt_double import LEAN_SITE, NO_LEAN
from tests.unit.trtpool.runtimes.test_tensorrt import GPU, batch, check, linear_engine, make_cfg, run
from trtpool.errors import EngineError
from trtpool.gpu import cuda, trt_api
from trtpool.runtimes.tensorrt import TensorRTRuntime
from trtpool_builder.installed import is_importable

LEAN_VERSION = "11.4.0.106"
BUILT_BY = "10.16.1.11"  # a version-compatible engine runs on this or any newer TensorRT


@pytest.fixture(params=trt_api.LEAN_MODULES)
def lean(request, monkeypatch):
    """Only the lean runtime installed, under one of its two names."""
    fake = FakeCudart((GPU,))
    monkeypatch.setattr(cuda, "_cudart", fake)
    module = make_module(fake, request.param, LEAN_VERSION)
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt raises ImportError
    for name in trt_api.LEAN_MODULES:
        monkeypatch.setitem(sys.modules, name, module if name == request.param else None)
    return module


def test_a_version_compatible_engine_is_served_by_the_lean_runtime(lean, tmp_path):
    path = linear_engine(tmp_path / "1", version=BUILT_BY, version_compatible=True)
    runtime = TensorRTRuntime(make_cfg(path.parent, runtime="tensorrt"), path, module_name="tensorrt")
    try:
        assert runtime.trt is lean and runtime.name == lean.__name__
        assert runtime._trt_runtime.engine_host_code_allowed  # the engine carries its lean runtime
        assert not lean._double.plugins_registered  # the lean module has no plugin library to register
        x = batch(3)
        check(run(runtime.create_context(0), x), x)  # float64 numpy's answer, within 1e-5
    finally:
        runtime.close()


def test_an_engine_that_is_not_version_compatible_is_refused_naming_the_fix(lean, tmp_path):
    path = linear_engine(tmp_path / "1", version=LEAN_VERSION)
    with pytest.raises(EngineError) as refused:
        TensorRTRuntime(make_cfg(path.parent), path, module_name="tensorrt")
    message = str(refused.value)
    assert f"engine '{path}' is not version-compatible, and {lean.__name__} {LEAN_VERSION} is TensorRT's lean " \
           "runtime, which runs version-compatible engines only" in message, message
    assert "--version-compatible" in message and "tensorrt-cu12" in message, message


def test_the_builder_never_takes_the_lean_runtime(lean):
    """It has no Builder: building still needs tensorrt or tensorrt_rtx, and says how to get them."""
    with pytest.raises(trt_api.TensorRTMissing) as missing:
        trt_api.import_tensorrt("tensorrt")
    assert list(missing.value.failures) == ["tensorrt"]
    assert trt_api.import_tensorrt("tensorrt", runtime_only=True) is lean
    assert "pip install tensorrt-lean-cu12-libs tensorrt-lean-cu12-bindings" in str(missing.value)


def test_without_a_gpu_the_lean_double_cannot_make_a_runtime_either(monkeypatch):
    module = make_module(FakeCudart(()), "tensorrt_lean_bindings", LEAN_VERSION)
    with pytest.raises(EngineError, match="could not create its runtime: createInferRuntime: Error Code 6: "
                                          "API Usage Error \\(CUDA initialization failure with error: 35"):
        trt_api.new_runtime(module, host_code=True)


REAL_RUNTIME = """
from trtpool.errors import EngineError
from trtpool.gpu import trt_api
import tensorrt_lean_bindings as lean
assert isinstance(trt_api.process_logger(lean), lean.ILogger)
trt_api.register_plugins(lean)
try:
    trt_api.new_runtime(lean, host_code=True)
except EngineError as exc:
    print(exc)
"""


@pytest.mark.skipif(not (LEAN_SITE / "tensorrt_lean_bindings").is_dir(), reason=NO_LEAN)
@pytest.mark.skipif(cuda.device_count() > 0, reason="checks the real lean runtime on a machine without CUDA")
def test_the_real_lean_runtime_without_cuda_is_an_engine_error_with_its_own_words():
    """It used to crash the process (SIGSEGV): the runtime made over a null pointer, then used."""
    env = {**os.environ, "PYTHONPATH": f"{LEAN_SITE}:{ROOT}"}
    result = subprocess.run([sys.executable, "-c", REAL_RUNTIME], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.startswith(f"tensorrt_lean_bindings {LEAN_VERSION} could not create its runtime: "
                                    "createInferRuntime: Error Code 6: API Usage Error (CUDA initialization "
                                    "failure with error: 35"), result.stdout


@pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="the script's TensorRT-RTX engine is built with tensorrt_rtx")
def test_the_h200_scripts_checks_all_run_over_the_doubles(lean, tmp_path):
    """bench/lean_runtime.py, which runs these checks on the H200 against the real lean runtime,
    gets through every one of them here over the doubles (no proof about TensorRT: a guard that
    the script itself works before GPU time is spent on it)."""
    from bench.lean_runtime import run_checks, write_rtx_engine

    write_rtx_engine(tmp_path / "rtx.plan")
    checks, log = run_checks((tmp_path / "rtx.plan").read_bytes())
    assert [c["check"].split(" (")[0] for c in checks] == [
        "module", "logger", "runtime", "host_code", "capture",
        "engine corrupt", "engine empty", "engine truncated", "engine tensorrt_rtx"]
    assert all(c["as_expected"] for c in checks), [c for c in checks if not c["as_expected"]]
    assert any(level == "ERROR" and "Error Code" in line for level, line in log), log
