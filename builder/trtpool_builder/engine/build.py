"""ONNX -> serialized engine + sidecar, with every option checked before building."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import onnx

from trtpool.errors import ConfigError
from trtpool.model.shapes import format_profile
from trtpool.model.sidecar import RTX_DEFAULT_TARGETS, Precision, Sidecar, Target, TensorInfo, write_sidecar
from trtpool.model.signature import Profile, ShapeRange
from trtpool_builder.engine.build_failure import foreign_operators, refused_axis, renamed_hint
from trtpool_builder.engine.gpu import gpu_status
from trtpool_builder.engine.trt_build import (
    ParseError,
    TrtSettings,
    build_serialized,
    compute_capability_enum,
    io_tensors,
)
from trtpool_builder.engine.trt_module import load_trt
from trtpool_builder.errors import BuildError, naming_the_users_file
from trtpool_builder.graph.dim_names import Renamed, rename_dims
from trtpool_builder.graph.onnx_io import file_sha256, io_specs, load_graph, output_shape_inferrer, save_model
from trtpool_builder.graph.profiles import resolve_profiles
from trtpool_builder.graph.scalars import describe_lifted, lift_scalars
from trtpool_builder.graph.served_copy import repair_for_serving
from trtpool_builder.graph.squeeze_axes import give_squeezes_axes
from trtpool_builder.precision import convert as prec
from trtpool_builder.precision.accuracy import DEFAULT_MAX_ERROR, AccuracyReport, compare, onnxruntime_runner
from trtpool_builder.precision.divergence import first_divergence
from trtpool_builder.precision.samples import Samples, load_samples, sample_feeds

OPT_LEVELS = range(0, 6)


@dataclass(frozen=True)
class BuildOptions:
    """The `trtpool-build` options; field names are the flags' names (--opt-level: opt_level)."""

    shapes: tuple[str, ...] = ()  # one optimization profile each (trtpool.model.shapes text)
    trt_module: str | None = None  # None: tensorrt when importable, else tensorrt_rtx
    precision: str = "fp32"
    calib: Path | None = None
    workspace: int | None = None  # MiB
    timing_cache: Path | None = None
    opt_level: int | None = None
    version_compatible: bool = False
    hardware_compatible: bool = False  # tensorrt only
    compute_capability: tuple[str, ...] = ()  # tensorrt_rtx targets, e.g. ("8.9",)
    legacy_precision_flags: bool = False  # tensorrt 10.x only
    max_error: float | None = None  # None: accuracy.DEFAULT_MAX_ERROR for the precision
    verbose: bool = field(default=False, compare=False)

    def error_limit(self) -> float:
        return self.max_error if self.max_error is not None else DEFAULT_MAX_ERROR.get(self.precision, 0.0)


@dataclass(frozen=True)
class BuildResult:
    engine: Path
    sidecar: Sidecar
    seconds: float
    accuracy: AccuracyReport | None
    notes: tuple[str, ...]


def check_options(options: BuildOptions, module_name: str) -> None:
    """Refuse what the chosen module cannot do, before any work."""
    if options.hardware_compatible and module_name != "tensorrt":
        raise ConfigError(
            "--hardware-compatible is a TensorRT option; TensorRT-RTX engines are portable "
            f"across their target GPUs already (default {', '.join(RTX_DEFAULT_TARGETS)}; "
            "choose them with --compute-capability)"
        )
    if options.version_compatible and module_name != "tensorrt":
        raise ConfigError(
            "--version-compatible is a TensorRT option: TensorRT-RTX engines only run on the "
            "TensorRT-RTX release that built them (rebuild after upgrading it)"
        )
    if options.compute_capability and module_name != "tensorrt_rtx":
        raise ConfigError(
            "--compute-capability is a TensorRT-RTX option; TensorRT builds for the GPU "
            "it runs on (see --hardware-compatible for Ampere-and-later portability)"
        )
    if options.opt_level is not None and options.opt_level not in OPT_LEVELS:
        raise ConfigError(f"--opt-level {options.opt_level}: expected 0..5")
    if options.workspace is not None and options.workspace < 1:
        raise ConfigError(f"--workspace {options.workspace}: expected a size in MiB >= 1")
    if options.max_error is not None and not options.max_error > 0:
        raise ConfigError(
            f"--max-error {options.max_error}: expected a number > 0 (0.05: a relative RMS "
            "error of 5 % against the fp32 model's outputs)"
        )


def _gpu_target(trt: ModuleType, module_name: str, options: BuildOptions) -> Target:
    if module_name == "tensorrt_rtx":
        for text in options.compute_capability:
            compute_capability_enum(trt, text)
        targets = tuple(options.compute_capability) or RTX_DEFAULT_TARGETS
        return Target(targets, None, False, options.version_compatible)
    gpu, why = gpu_status()
    if gpu is None:
        raise BuildError(
            f"the 'tensorrt' builder needs a CUDA GPU to build for: {why}. Build on the "
            "serving GPU, or build ahead of time without one with --trt-module tensorrt_rtx"
        )
    return Target((gpu.compute_capability,), gpu.name, options.hardware_compatible, options.version_compatible)


def _tensor_infos(
    described: list[tuple[str, str, tuple[int, ...]]], ranges: Callable[[str], tuple[ShapeRange, ...]]
) -> tuple[TensorInfo, ...]:
    return tuple(TensorInfo(name, dtype, shape, ranges(name)) for name, dtype, shape in described)


def _output_ranges(model: Any, profiles: tuple[Profile, ...]) -> dict[str, tuple[ShapeRange, ...]]:
    infer = output_shape_inferrer(model)
    per_profile = []
    for p in profiles:
        shapes = [infer({n: getattr(r, which) for n, r in p.ranges.items()}) for which in ("min", "opt", "max")]
        per_profile.append(shapes)
    names = per_profile[0][0].keys() if per_profile else ()
    return {name: tuple(ShapeRange(lo[name], opt[name], hi[name]) for lo, opt, hi in per_profile) for name in names}


def _accuracy_report(
    source: Path, onnx_path: Path, prepared: prec.PreparedModel, precision: str, feeds: list[Samples], notes: list[str]
) -> AccuracyReport | None:
    """The converted graph vs the fp32 one on the sample feeds (None when nothing was converted).

    `source`: the fp32 graph as built (the user's `onnx_path`, or its copy with scalars lifted
    and dimensions renamed: the same numbers, the copy's input shapes)."""
    if precision == "fp32":
        return None
    if not prepared.converted:
        notes.append(
            f"no accuracy report: the {precision} engine was built from the ONNX graph as "
            "given (precision set by builder flags or already in the graph)"
        )
        return None
    report = compare(
        onnxruntime_runner(source),
        onnxruntime_runner(prepared.check_path or prepared.path),
        feeds,
        f"fp32 '{onnx_path.name}' on ONNX Runtime",
        prepared.check_label,
    )
    notes.append(
        "the engine itself was not executed for the accuracy report (run trtpool-accuracy "
        "on a GPU that can run it); the report compares the ONNX graph it was built from"
    )
    return report


def _check_accuracy(
    report: AccuracyReport,
    limit: float,
    source: Path,
    onnx_path: Path,
    prepared: prec.PreparedModel,
    precision: str,
    feeds: list[Samples],
    given_samples: bool,
) -> None:
    """Refuse a conversion whose outputs differ from fp32's beyond `limit`, naming where it departs."""
    beyond = report.beyond(limit)
    if not beyond:
        return
    outputs = "; ".join(
        f"output '{e.name}' error {e.error:.3g} (max abs {e.max_abs:.3g}, largest |reference| {e.reference_max:.3g})"
        for e in beyond
    )
    inputs = "the --calib samples" if given_samples else "random inputs at each profile's opt shapes"
    where = first_divergence(onnx.load(str(source)), onnx.load(str(prepared.check_path or prepared.path)), feeds, limit)
    kept = "; ".join(k.describe() for k in prepared.kept_fp32)
    raise BuildError(
        f"the {precision} conversion of '{onnx_path}' is not accurate enough on {inputs} "
        f"({report.samples} samples), compared with the fp32 model on ONNX Runtime: {outputs}; "
        f"--max-error is {limit:g}."
        + (f"\n{where}." if where else "")
        + (f"\nkept in fp32 already: {kept}." if kept else "")
        + "\nNo engine was written. Build with --precision fp32, give representative inputs with --calib, "
        "or accept the difference with a larger --max-error"
    )


def _build_source(
    model: onnx.ModelProto, onnx_path: Path, profiles: tuple[Profile, ...], workdir: Path, changed: bool
) -> tuple[Path, list[Renamed]]:
    """The file to convert and build: a copy of `model` (already `changed`, e.g. its scalars lifted)
    with dimension names TensorRT can use, or the user's file when nothing needed changing
    (the user's file is never modified)."""
    renamed = rename_dims(model, profiles)
    if not renamed and not changed:
        return onnx_path, []
    onnx.load_external_data_for_model(model, str(onnx_path.parent))
    return save_model(model, workdir / "model.named.onnx"), renamed


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def _describe(
    trt: ModuleType,
    module_name: str,
    network: Any,
    model: onnx.ModelProto,
    onnx_path: Path,
    output: Path,
    options: BuildOptions,
    target: Target,
    prepared: prec.PreparedModel,
    accuracy: AccuracyReport | None,
    profiles: tuple[Profile, ...],
    seconds: float,
) -> Sidecar:
    input_desc, output_desc = io_tensors(trt, network)
    input_ranges = {
        n: tuple(ShapeRange(p.ranges[n].min, p.ranges[n].opt, p.ranges[n].max) for p in profiles)
        for n, _, _ in input_desc
    }
    output_ranges = _output_ranges(model, profiles)
    return Sidecar(
        engine=str(output),
        module=module_name,
        module_version=trt.__version__,
        target=target,
        precision=Precision(
            options.precision,
            strongly_typed=not options.legacy_precision_flags,
            legacy_flags=prepared.legacy_flags,
            quantizer=prepared.quantizer,
            kept_fp32=tuple(k.node for k in prepared.kept_fp32),
            max_error=accuracy.max_error if accuracy else None,
            max_error_allowed=options.error_limit() if accuracy else None,
        ),
        profiles=tuple(format_profile(p.ranges) for p in profiles),
        inputs=_tensor_infos(input_desc, lambda n: input_ranges[n]),
        outputs=_tensor_infos(output_desc, lambda n: output_ranges.get(n, ())),
        onnx_path=str(onnx_path),
        onnx_sha256=file_sha256(onnx_path),
        build_options=command_options(onnx_path, output, options, module_name),
        build_seconds=round(seconds, 3),
        build_date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def build_engine(
    onnx_path: Path, output: Path, options: BuildOptions = BuildOptions(), log: Callable[[str], None] = print
) -> BuildResult:
    """Build `onnx_path` into `output` and write `<output>.json`; the file appears only on success.

    Every option is checked against the model and the TensorRT module first."""
    started = time.perf_counter()
    onnx_path, output = Path(onnx_path).resolve(), Path(output).resolve()
    trt, module_name = load_trt(options.trt_module)
    check_options(options, module_name)
    model = load_graph(onnx_path)
    repaired = repair_for_serving(model, onnx_path, options.shapes)
    lifted = lift_scalars(model)
    inputs, _ = io_specs(model)
    profiles = resolve_profiles(options.shapes, inputs)
    squeezes = give_squeezes_axes(model, profiles)
    prec.check_precision(
        options.precision,
        module_name,
        trt.__version__,
        options.legacy_precision_flags,
        options.calib is not None,
        prec.graph_has_dtype(model, onnx.TensorProto.BFLOAT16),
    )
    target = _gpu_target(trt, module_name, options)
    samples = load_samples(options.calib, inputs) if options.calib else None
    notes: list[str] = []
    timing_cache = options.timing_cache
    if timing_cache is not None and module_name == "tensorrt_rtx":
        notes.append(
            f"--timing-cache '{timing_cache}' ignored: timing cache operations are no-ops in "
            "TensorRT-RTX (deprecated since 1.2; it picks kernels when the engine first runs), "
            "so nothing is read or written"
        )
        timing_cache = None

    with (
        tempfile.TemporaryDirectory(prefix="trtpool-build-") as workdir,
        naming_the_users_file(onnx_path, {Path(workdir): "a working copy of {file}"}),
    ):
        source, renamed = _build_source(model, onnx_path, profiles, Path(workdir), bool(repaired or lifted or squeezes))
        notes.extend(repaired)
        notes.extend([describe_lifted(lifted)] if lifted else [])
        notes.extend(squeezes)
        notes.extend(r.describe() for r in renamed)
        feeds = sample_feeds(samples, inputs, profiles) if options.precision in prec.SAMPLED else []
        prepared = prec.prepare(
            source, options.precision, options.legacy_precision_flags, samples, Path(workdir), feeds
        )
        notes.extend(f"kept in fp32: {k.describe()}" for k in prepared.kept_fp32)
        accuracy = _accuracy_report(source, onnx_path, prepared, options.precision, feeds, notes)
        if accuracy is not None:
            _check_accuracy(
                accuracy,
                options.error_limit(),
                source,
                onnx_path,
                prepared,
                options.precision,
                feeds,
                samples is not None,
            )
        settings = TrtSettings(
            profiles,
            prec.network_flags(trt, options.legacy_precision_flags),
            options.workspace,
            options.opt_level,
            options.version_compatible,
            options.hardware_compatible,
            tuple(options.compute_capability),
            prepared.legacy_flags,
            timing_cache,
        )
        label = f"the {options.precision} conversion of '{onnx_path}'" if prepared.converted else f"'{onnx_path}'"
        try:
            engine, network = build_serialized(trt, prepared.path, settings, options.verbose, notes, label)
        except ParseError as exc:
            raise BuildError(f"{exc}{foreign_operators(load_graph(prepared.path))}") from exc
        except BuildError as exc:
            raise BuildError(f"{exc}{refused_axis(source, model, inputs, profiles)}{renamed_hint(renamed)}") from exc

    _write_atomically(output, engine)
    seconds = time.perf_counter() - started
    sidecar = _describe(
        trt, module_name, network, model, onnx_path, output, options, target, prepared, accuracy, profiles, seconds
    )
    write_sidecar(output, sidecar)
    for note in notes:
        log(f"note: {note}")
    if accuracy is not None:
        log(accuracy.format())
    return BuildResult(output, sidecar, seconds, accuracy, tuple(notes))


def command_options(onnx_path: Path, output: Path, options: BuildOptions, module_name: str) -> dict[str, Any]:
    """The options as `trtpool-build` flags (sidecar.format_command renders them), paths absolute."""
    recorded: dict[str, Any] = {"onnx": str(onnx_path), "output": str(output)}
    for key, value in asdict(options).items():
        if key == "verbose":
            continue
        if isinstance(value, Path):
            value = str(value.resolve())
        recorded[key] = list(value) if isinstance(value, tuple) else value
    recorded["trt_module"] = module_name
    return recorded
