"""The TensorRT 10 / TensorRT-RTX builder API calls: parse, configure, build.

Written against the API both modules share; the few differences (timing
cache, hardware compatibility, target compute capabilities) are handled
where they are set, and refused earlier by `build.check_options`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from trtpool.gpu import trt_api
from trtpool.model.signature import Profile
from trtpool_builder.errors import BuildError

# A warning, not an error, in TensorRT-RTX 1.7: the engine is written and then refuses those shapes.
INCONSISTENT_PROFILE = "values are not self-consistent"


def _printer(trt: ModuleType, verbose: bool) -> trt_api.Show:
    """Prints TensorRT's warnings and errors (everything with `verbose`) to stderr."""
    shown = trt.ILogger.Severity.VERBOSE if verbose else trt.ILogger.Severity.WARNING

    def show(severity: Any, msg: str) -> None:
        if severity <= shown:
            print(f"[{trt.__name__}] {severity.name}: {msg}", file=sys.stderr)

    return show


@dataclass(frozen=True)
class TrtSettings:
    """What goes into IBuilderConfig, already checked against the module."""

    profiles: tuple[Profile, ...]
    network_flags: int
    workspace_mib: int | None = None
    opt_level: int | None = None
    version_compatible: bool = False
    hardware_compatible: bool = False  # tensorrt only
    compute_capabilities: tuple[str, ...] = ()  # tensorrt_rtx only
    legacy_flags: tuple[str, ...] = ()  # BuilderFlag names, tensorrt 10 only
    timing_cache: Path | None = None  # tensorrt only (no-op in tensorrt_rtx)


class ParseError(BuildError):
    """TensorRT's ONNX parser refused the graph (before any build)."""


def parse_onnx(trt: ModuleType, builder: Any, path: Path, flags: int, label: str) -> Any:
    """The network; a parse error names the model (`label`), node index, node name and operator."""
    with trt_api.tensorrt_errors() as logged:
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, trt_api.process_logger(trt))
        parsed = parser.parse_from_file(str(path))
    if not parsed:
        problems = []
        for i in range(parser.num_errors):
            e = parser.get_error(i)
            where = f"node {e.node()}" if e.node() >= 0 else "the model"
            if e.node_name():
                where += f" '{e.node_name()}'"
            if e.node_operator():
                where += f" ({e.node_operator()})"
            problems.append(f"{where}: {e.desc()}")
        raise ParseError(f"{trt.__name__} cannot parse {label}:\n  " + "\n  ".join(problems or logged))
    return network


def compute_capability_enum(trt: ModuleType, text: str) -> Any:
    """'8.9' -> trt.ComputeCapability.SM89."""
    member = getattr(trt.ComputeCapability, "SM" + text.replace(".", ""), None)
    if member is None:
        known = [m[2:-1] + "." + m[-1] for m in trt.ComputeCapability.__members__ if m.startswith("SM")]
        raise BuildError(f"--compute-capability {text}: {trt.__name__} targets {', '.join(known)}")
    return member


def _configure(trt: ModuleType, builder: Any, settings: TrtSettings, notes: list[str]) -> Any:
    config = builder.create_builder_config()
    for profile in settings.profiles:
        trt_profile = builder.create_optimization_profile()
        for name, r in profile.ranges.items():
            trt_profile.set_shape(name, r.min, r.opt, r.max)
        config.add_optimization_profile(trt_profile)
    if settings.workspace_mib is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_mib << 20)
    if settings.opt_level is not None:
        config.builder_optimization_level = settings.opt_level
    if settings.version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    if settings.hardware_compatible:
        config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS
    if settings.compute_capabilities:
        config.num_compute_capabilities = len(settings.compute_capabilities)
        for index, text in enumerate(settings.compute_capabilities):
            config.set_compute_capability(compute_capability_enum(trt, text), index)
    for flag in settings.legacy_flags:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    if settings.timing_cache is not None:
        data = settings.timing_cache.read_bytes() if settings.timing_cache.is_file() else b""
        cache = config.create_timing_cache(data)
        if not config.set_timing_cache(cache, ignore_mismatch=False):
            notes.append(
                f"timing cache '{settings.timing_cache}' was made for another device or "
                "TensorRT version; starting a new one"
            )
            config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
        elif data:
            notes.append(f"timing cache '{settings.timing_cache}' loaded ({len(data)} bytes)")
    return config


def build_serialized(
    trt: ModuleType, onnx_path: Path, settings: TrtSettings, verbose: bool, notes: list[str], label: str
) -> tuple[bytes, Any]:
    """(serialized engine, network) — the network describes the engine's I/O tensors.

    `label` names the model in errors (the user's file, not a temporary conversion). TensorRT's
    messages are printed (`_printer`), not logged, and a profile the graph cannot run counts as
    an error."""
    with (
        trt_api.tensorrt_messages(_printer(trt, verbose)),
        trt_api.tensorrt_errors(counting=INCONSISTENT_PROFILE) as errors,
    ):
        builder = trt.Builder(trt_api.process_logger(trt))
        network = parse_onnx(trt, builder, onnx_path, settings.network_flags, label)
        config = _configure(trt, builder, settings, notes)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None or errors:
            raise BuildError(
                f"{trt.__name__} could not build an engine from {label}:\n  "
                + "\n  ".join(errors or ["(no error was logged; rerun with --verbose)"])
            )
        if settings.timing_cache is not None:
            data = bytes(memoryview(config.get_timing_cache().serialize()))
            settings.timing_cache.parent.mkdir(parents=True, exist_ok=True)
            settings.timing_cache.write_bytes(data)
            notes.append(f"timing cache '{settings.timing_cache}' written ({len(data)} bytes)")
        return bytes(memoryview(serialized)), network


def io_tensors(trt: ModuleType, network: Any) -> tuple[list[tuple[str, str, tuple[int, ...]]], ...]:
    """([(name, numpy dtype name, shape)] for inputs, same for outputs), from the network."""

    def describe(tensors: Sequence[Any]) -> list[tuple[str, str, tuple[int, ...]]]:
        return [(t.name, np.dtype(trt.nptype(t.dtype)).name, tuple(t.shape)) for t in tensors]

    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    outputs = [network.get_output(i) for i in range(network.num_outputs)]
    return describe(inputs), describe(outputs)
