"""Precision for strongly typed builds: the ONNX graph's own types decide.

TensorRT 10.12+ deprecates the FP16/INT8/BF16/FP8 builder flags, TensorRT 11
removes them and TensorRT-RTX never had them. So a precision other than fp32
is applied to the ONNX graph before parsing:

- fp16: float tensors become float16, inputs and outputs stay float32. ONNX Runtime's
  converter (onnxruntime.transformers.float16) does it: it is onnxconverter-common's
  converter maintained further, and unlike onnxconverter-common 1.16 it also retargets
  Cast(to=float) nodes, without which a graph such as BERT's mask arithmetic mixes
  float16 and float32 inputs in one node and TensorRT refuses to parse it. Nodes that
  make or read values beyond float16's range stay in fp32 (fp16_safety);
- int8: Q/DQ nodes by post-training quantization with calibration samples
  (NVIDIA ModelOpt when installed, else ONNX Runtime's quantize_static, QDQ format);
- fp8: Q/DQ nodes by ModelOpt only;
- bf16: no converter exists (both converters write float16 only), so an
  ONNX graph that already uses bfloat16 is built as is, and anything else is refused.

`legacy` keeps TensorRT 10's builder flags instead (a weakly typed network):
fp16/bf16 then leave the graph alone and set the flag.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import onnx

from trtpool.errors import ConfigError
from trtpool_builder.errors import BuildError
from trtpool_builder.graph.onnx_io import save_model
from trtpool_builder.installed import is_importable
from trtpool_builder.precision.fp16_emulation import emulate_fp16
from trtpool_builder.precision.fp16_safety import KeptInFp32, keep_in_fp32, shape_arithmetic, skip_fp16_round_trips
from trtpool_builder.precision.samples import Samples, SampleSet
from trtpool_builder.precision.tensor_probe import name_nodes, tensor_types

PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
# Precisions whose graph is converted here and then checked against the fp32 one on samples.
SAMPLED = ("fp16", "int8", "fp8")
LEGACY_FLAGS = {"fp16": ("FP16",), "bf16": ("BF16",), "int8": ("INT8",), "fp8": ("FP8",)}
QUANTIZED = ("int8", "fp8")


@dataclass(frozen=True)
class PreparedModel:
    path: Path  # the ONNX file to parse
    converted: bool  # False: `path` is the original file
    quantizer: str | None  # modelopt | onnxruntime
    legacy_flags: tuple[str, ...]
    kept_fp32: tuple[KeptInFp32, ...] = ()
    # What the accuracy check runs for this precision on ONNX Runtime (None: `path` itself).
    check_path: Path | None = None
    check_label: str = "the converted ONNX on ONNX Runtime"


def quantizer_for(precision: str) -> str | None:
    if precision not in QUANTIZED:
        return None
    if is_importable("modelopt.onnx.quantization"):
        return "modelopt"
    return "onnxruntime" if precision == "int8" else None


def check_precision(
    precision: str, module_name: str, module_version: str, legacy: bool, has_calibration: bool, onnx_has_bf16: bool
) -> None:
    """Refuse unsupported combinations before anything is converted or built."""
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision '{precision}': expected one of {', '.join(PRECISIONS)}")
    if legacy:
        if module_name != "tensorrt" or not module_version.startswith("10."):
            raise ConfigError(
                f"--legacy-precision-flags needs the 'tensorrt' module version 10.x; this build uses "
                f"{module_name} {module_version}, where precision comes from the ONNX types only "
                "(drop the flag: the graph is converted instead)"
            )
        if precision == "fp32":
            raise ConfigError("--legacy-precision-flags with --precision fp32 sets no flag; drop it")
    if precision == "fp8" and quantizer_for("fp8") is None:
        raise ConfigError(
            "--precision fp8 needs NVIDIA ModelOpt to insert FP8 Q/DQ nodes "
            "(pip install 'trtpool[modelopt]'); ONNX Runtime's quantizer has no FP8"
        )
    if precision in QUANTIZED and not has_calibration:
        raise ConfigError(
            f"--precision {precision} needs calibration samples: --calib DIR_OR_FILE "
            "(.npz arrays named after the inputs, a .npy for one input, or a folder of them)"
        )
    if precision not in SAMPLED and has_calibration:
        raise ConfigError(f"--calib is only used for fp16 (range check and accuracy), int8 and fp8, not {precision}")
    if precision == "bf16" and not legacy and not onnx_has_bf16:
        raise ConfigError(
            "--precision bf16: no ONNX converter writes bfloat16 (onnxconverter-common and ONNX "
            "Runtime convert to float16 only) and strongly typed builds take precision from the graph. "
            "Export the model in bfloat16 (e.g. PyTorch model.to(torch.bfloat16) before torch.onnx.export) and build "
            "that file with --precision bf16, or use --precision fp16"
            + (", or --legacy-precision-flags" if module_name == "tensorrt" else "")
        )


def graph_has_dtype(model: onnx.ModelProto, elem_type: int) -> bool:
    graph = model.graph
    values = (*graph.input, *graph.output, *graph.value_info)
    return any(v.type.tensor_type.elem_type == elem_type for v in values) or any(
        t.data_type == elem_type for t in graph.initializer
    )


def _to_fp16(source: Path, dest: Path, feeds: Sequence[Samples], flags: tuple[str, ...]) -> PreparedModel:
    """Convert to float16 except the nodes fp16_safety finds (those kept for their values are
    reported; shape arithmetic is not); the check runs fp16_emulation's graph."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))
    name_nodes(model)
    kept = keep_in_fp32(model, feeds)
    types = tensor_types(model)
    names = [k.node for k in kept] + shape_arithmetic(model, types)
    emulated = save_model(emulate_fp16(model, names, types), dest.with_name("model.fp16-emulated.onnx"))
    converted = convert_float_to_float16(model, keep_io_types=True, node_block_list=names)
    skip_fp16_round_trips(converted)
    save_model(converted, dest)
    return PreparedModel(
        dest,
        True,
        None,
        flags,
        tuple(kept),
        emulated,
        "the fp16 graph emulated on ONNX Runtime (float16 tensors, float32 arithmetic)",
    )


def _quantize_modelopt(source: Path, dest: Path, mode: str, samples: SampleSet) -> None:
    from modelopt.onnx.quantization import quantize

    if not samples.rows_only:
        raise ConfigError(
            "ModelOpt takes calibration samples as rows of a batch (every array the input's "
            "rank, its first axis the batch); give them so, or uninstall nvidia-modelopt to "
            "calibrate int8 with ONNX Runtime, which takes any form"
        )
    quantize(
        onnx_path=str(source),
        quantize_mode=mode,
        calibration_data=samples.arrays,
        calibration_eps=["cpu"],
        output_path=str(dest),
    )


def _quantize_onnxruntime(source: Path, dest: Path, samples: SampleSet) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = iter(samples.feeds())

        def get_next(self) -> Samples | None:
            return next(self._batches, None)

    # TensorRT takes symmetric INT8 Q/DQ (zero point 0), weights per channel, and no
    # int32 bias DequantizeLinear; it fuses Q/DQ into convolutions and matrix products.
    with _quiet_root_logger():  # quantize_static logs advice through the root logger
        quantize_static(
            str(source),
            str(dest),
            Reader(),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=["Conv", "MatMul", "Gemm"],
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False},
        )


@contextmanager
def _quiet_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def prepare(
    source: Path, precision: str, legacy: bool, samples: SampleSet | None, workdir: Path, feeds: Sequence[Samples] = ()
) -> PreparedModel:
    """The ONNX file to parse for `precision`, converted or quantized into `workdir` when needed.

    `feeds`: sample inputs on which fp16 looks for activations beyond its range."""
    flags = LEGACY_FLAGS.get(precision, ()) if legacy else ()
    dest = workdir / f"model.{precision}.onnx"
    try:
        if precision in QUANTIZED:
            assert samples is not None  # check_precision refused a quantized precision without them
            quantizer = quantizer_for(precision)
            if quantizer == "modelopt":
                _quantize_modelopt(source, dest, precision, samples)
            else:
                _quantize_onnxruntime(source, dest, samples)
            return PreparedModel(dest, True, quantizer, flags)
        if precision == "fp16" and not legacy:
            return _to_fp16(source, dest, feeds, flags)
    except (ConfigError, BuildError):
        raise
    except Exception as exc:
        raise BuildError(f"converting '{source}' to {precision} failed: {type(exc).__name__}: {exc}") from exc
    return PreparedModel(source, False, None, flags)


def network_flags(trt: ModuleType, legacy: bool) -> int:
    """STRONGLY_TYPED unless legacy flags are asked for (TensorRT 11 may drop the enum member)."""
    member = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    return 0 if legacy or member is None else 1 << int(member)
