"""trtpool's TensorRT load path against TensorRT's real lean runtime (tensorrt_lean_bindings 11.4,
issue 37 item 14(a)), not the test double. bench/gpu/h200.sh's stage `lean-runtime` runs it on the
H200 with the cp312 lean wheels installed by `pip install --target`; on a machine without CUDA it
reports that TensorRT could not make its runtime, and stops there.

    python bench/lean_runtime.py --rtx-engine PLAN --out lean_runtime.json
    python bench/lean_runtime.py --write-rtx-engine PLAN   # where tensorrt_rtx builds (bench/gpu/fetch_wheels.sh)

Each check is recorded with what trtpool said and whether it is what the check expects:
  module      the TensorRT runtime's import takes the lean module where `tensorrt` is not installed
  logger      the process logger is the module's ILogger, once per process; no plugin registration
  runtime     trt_api.new_runtime: a real Runtime, or an EngineError with TensorRT's own words
  host_code   engine_host_code_allowed: False by default, True where trtpool asks (version-compatible)
  capture     a failed deserialization's errors reach a tensorrt_errors block on the calling thread
              only, and trtpool's log at ERROR
  engines     TensorRTRuntime on model.plan, its sidecar saying TensorRT of this release,
              version-compatible, for this GPU: a corrupt, an empty and a truncated file and a
              TensorRT-RTX engine, each refused with TensorRT's words inside trtpool's message
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from trtpool import parameters
from trtpool.errors import EngineError, TrtpoolError
from trtpool.gpu import cuda, trt_api
from trtpool.model.sidecar import Precision, Sidecar, Target, TensorInfo, write_sidecar

Check = dict[str, Any]


class Records(logging.Handler):
    """trtpool's log, kept: TensorRT's messages reach it through the process logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelname, record.getMessage()))


def check(name: str, expected: str, run: Callable[[], tuple[bool, str]]) -> Check:
    """Run one check; an exception is its result (a trtpool error is what some checks expect)."""
    started = time.perf_counter()
    try:
        ok, said = run()
    except Exception as exc:  # noqa: BLE001 - recorded as the check's outcome
        ok, said = False, f"{type(exc).__name__}: {exc}"
    return {
        "check": name,
        "expected": expected,
        "as_expected": ok,
        "said": said,
        "seconds": round(time.perf_counter() - started, 3),
    }


def refused_in_tensorrts_words(exc: TrtpoolError) -> bool:
    return "said: " in str(exc) and "Error Code" in str(exc).split("said: ", 1)[1]


def module_check() -> tuple[bool, str]:
    trt = trt_api.import_tensorrt("tensorrt", runtime_only=True)
    return trt_api.is_lean(trt), f"{trt.__name__} {trt.__version__} from {getattr(trt, '__file__', '?')}"


def logger_check(trt: ModuleType) -> tuple[bool, str]:
    logger = trt_api.process_logger(trt)
    trt_api.register_plugins(trt)
    same = trt_api.process_logger(trt) is logger
    return isinstance(logger, trt.ILogger) and same, (
        f"ILogger subclass {type(logger).__name__}, one per process: {same}; "
        f"init_libnvinfer_plugins in the module: {hasattr(trt, 'init_libnvinfer_plugins')}"
    )


def host_code_check(trt: ModuleType) -> tuple[bool, str]:
    default = trt_api.new_runtime(trt, host_code=False).engine_host_code_allowed
    allowed = trt_api.new_runtime(trt, host_code=True).engine_host_code_allowed
    return (default, allowed) == (False, True), f"default {default}, asked for {allowed}"


def capture_check(trt: ModuleType, records: Records) -> tuple[bool, str]:
    """Two threads: one deserializes a corrupt file inside its block, the other only holds a block."""
    runtime = trt_api.new_runtime(trt, host_code=False)
    started, finished = threading.Event(), threading.Event()
    worker: dict[str, Any] = {}

    def deserialize() -> None:
        with trt_api.tensorrt_errors() as errors:
            started.wait(timeout=10)
            worker["engine"] = runtime.deserialize_cuda_engine(b"\0" * 64)
        worker["errors"] = errors
        finished.set()

    thread = threading.Thread(target=deserialize)
    logged = len(records.lines)
    thread.start()
    with trt_api.tensorrt_errors() as mine:
        started.set()
        finished.wait(timeout=60)
    thread.join()
    errors = [line for level, line in records.lines[logged:] if level == "ERROR"]
    ok = worker["engine"] is None and bool(worker["errors"]) and not mine and bool(errors)
    return ok, f"the deserializing thread's block: {worker['errors']}; the other's: {mine}; logged at ERROR: {errors}"


def engine_folder(root: Path, name: str, data: bytes, trt: ModuleType) -> Path:
    """model.plan holding `data`, with the sidecar a version-compatible engine of this release
    built for this GPU would have, so that trtpool's own checks let TensorRT judge the bytes."""
    gpu = cuda.device_properties(0)
    path = root / name / "1" / "model.plan"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    write_sidecar(
        path,
        Sidecar(
            engine=str(path),
            module="tensorrt",
            module_version=trt.__version__,
            target=Target((gpu.compute_capability,), gpu.name, version_compatible=True),
            precision=Precision("fp32", strongly_typed=True),
            profiles=("x=1x4:4x4:8x4",),
            inputs=(TensorInfo("x", "float32", (-1, 4)),),
            outputs=(TensorInfo("y", "float32", (-1, 4)),),
            onnx_path="model.onnx",
            onnx_sha256="0" * 64,
            build_options={
                "onnx": "model.onnx",
                "output": str(path),
                "trt_module": "tensorrt",
                "version_compatible": True,
            },
        ),
    )
    return path


def engine_check(path: Path) -> tuple[bool, str]:
    from trtpool.runtimes.tensorrt import TensorRTRuntime

    cfg = parameters.load(
        {"name": path.parent.parent.name, "max_batch_size": 8, "parameters": {"runtime": {"string_value": "tensorrt"}}},
        path.parent,
        "cuda:0",
    )
    try:
        runtime = TensorRTRuntime(cfg, path, module_name="tensorrt")
    except EngineError as exc:
        return refused_in_tensorrts_words(exc), str(exc)
    runtime.close()
    return False, "loaded: a file that is no engine of this release was deserialized"


def engines(rtx_engine: bytes) -> dict[str, bytes]:
    return {
        "corrupt": b"not an engine, " * 64,
        "empty": b"",
        "truncated": rtx_engine[: len(rtx_engine) // 2],
        "tensorrt_rtx": rtx_engine,
    }


def run_checks(rtx_engine: bytes) -> tuple[list[Check], list[tuple[str, str]]]:
    """The checks, and trtpool's log (TensorRT's messages among it) while they ran."""
    records = Records()
    logger = logging.getLogger("trtpool")
    logger.addHandler(records)
    level, logger.level = logger.level, logging.DEBUG
    try:
        return _checks(rtx_engine, records), records.lines
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)


def _checks(rtx_engine: bytes, records: Records) -> list[Check]:
    checks = [check("module", "the lean module, tensorrt not installed", module_check)]
    if not checks[0]["as_expected"]:
        return checks
    trt = trt_api.import_tensorrt("tensorrt", runtime_only=True)
    checks.append(check("logger", "one ILogger of the module; no plugins to register", lambda: logger_check(trt)))
    checks.append(
        check(
            "runtime",
            "a Runtime (an EngineError with TensorRT's words where CUDA is unusable)",
            lambda: (trt_api.new_runtime(trt, host_code=False) is not None, "created"),
        )
    )
    if not checks[-1]["as_expected"]:
        return checks  # nothing below can run without a runtime
    checks.append(check("host_code", "False by default, True when asked", lambda: host_code_check(trt)))
    checks.append(
        check("capture", "the failing thread's block only; the log at ERROR", lambda: capture_check(trt, records))
    )
    with tempfile.TemporaryDirectory(prefix="lean-runtime-") as root:
        for name, data in engines(rtx_engine).items():
            checks.append(
                check(
                    f"engine {name} ({len(data)} bytes)",
                    "refused with TensorRT's words",
                    lambda: engine_check(engine_folder(Path(root), name, data, trt)),
                )
            )
    return checks


def write_rtx_engine(path: Path) -> None:
    """A small TensorRT-RTX engine, built here without a GPU: bytes a TensorRT runtime must refuse."""
    import onnx
    from onnx import TensorProto, helper

    from trtpool_builder.engine.build import BuildOptions, build_engine

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
    )
    with tempfile.TemporaryDirectory() as work:
        model = Path(work) / "relu.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
        built = build_engine(
            model,
            Path(work) / "relu.plan",
            BuildOptions(trt_module="tensorrt_rtx", shapes=("x=1x4:4x4:8x4",)),
            log=lambda _: None,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(built.engine.read_bytes())
    print(f"wrote {path} ({path.stat().st_size} bytes, tensorrt_rtx {built.sidecar.module_version})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtx-engine", type=Path, help="a TensorRT-RTX engine (--write-rtx-engine makes one)")
    parser.add_argument("--out", type=Path, help="where the report goes (required unless --write-rtx-engine)")
    parser.add_argument("--write-rtx-engine", type=Path, metavar="PLAN", help="build the TensorRT-RTX engine and stop")
    args = parser.parse_args()
    if args.write_rtx_engine:
        write_rtx_engine(args.write_rtx_engine)
        return 0
    if args.rtx_engine is None or args.out is None:
        parser.error("--rtx-engine and --out are required (or --write-rtx-engine)")
    checks, log = run_checks(args.rtx_engine.read_bytes())
    report = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "machine": platform.node(),
        "gpus": cuda.device_count(),
        "checks": checks,
        "all_as_expected": all(c["as_expected"] for c in checks),
        "log": log,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for c in checks:
        print(f"{'ok ' if c['as_expected'] else 'NO '} {c['check']}: {c['said'][:400]}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
