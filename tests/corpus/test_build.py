"""Every corpus model through trtpool-build with TensorRT-RTX (for real, on this CPU machine) at fp32
and fp16, then trtpool-model on the engine; a model TensorRT cannot build is refused with its reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.corpus.manifest import CORPUS, CorpusModel
from trtpool.model.sidecar import read_sidecar
from trtpool.model.signature import is_batched
from trtpool_builder.engine.build import BuildOptions, build_engine
from trtpool_builder.errors import BuildError
from trtpool_builder.folder.model_folder import make_model_folder, read_config
from trtpool_builder.graph.onnx_io import io_specs, load_graph
from trtpool_builder.installed import is_importable

pytestmark = pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")

CALIBRATION_BATCH = 16


def _calibration(entry: CorpusModel, source: Path, folder: Path) -> Path | None:
    """Samples from the manifest's generator for a batched model (a .npz stacks samples on axis 0);
    an unbatched one is checked on random inputs at its profiles' opt shapes."""
    if not is_batched(*io_specs(load_graph(source))):
        return None
    shapes = {name: (CALIBRATION_BATCH, *shape[1:]) for name, shape in entry.shapes[0].items()}
    path = folder / f"{entry.name}.calib.npz"
    np.savez(path, **entry.make_inputs(shapes, np.random.default_rng(7)))
    return path


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("entry", CORPUS, ids=lambda m: m.name)
def test_builds_with_tensorrt_rtx_and_makes_a_folder(entry: CorpusModel, precision: str, tmp_path: Path,
                                                     corpus_files: dict[str, Path]) -> None:
    source = corpus_files[entry.name]
    options = BuildOptions(trt_module="tensorrt_rtx", shapes=entry.profile_texts(), precision=precision,
                           calib=_calibration(entry, source, tmp_path) if precision == "fp16" else None)
    engine = tmp_path / f"{entry.name}.{precision}.plan"
    if entry.tensorrt:
        with pytest.raises(BuildError, match=r"(?s)nodes outside the standard ONNX domain.*serve the ONNX file "
                                             r"with ONNX Runtime"):
            build_engine(source, engine, options)
        assert not engine.exists()
        return
    result = build_engine(source, engine, options)
    sidecar = read_sidecar(engine)
    model = onnx.load(str(source), load_external_data=False)
    inputs, outputs = io_specs(model)
    assert [(t.name, t.dtype) for t in sidecar.inputs] == [(s.name, s.dtype.name) for s in inputs]
    assert [t.name for t in sidecar.outputs] == [s.name for s in outputs]
    assert len(sidecar.profiles) == len(entry.profile_texts())
    if precision == "fp16":
        assert sidecar.precision.max_error == result.accuracy.max_error <= sidecar.precision.max_error_allowed
    folder = make_model_folder(tmp_path / "repo", entry.name, engine)
    assert (folder / "1" / "model.plan.json").is_file()
    assert read_config(folder).parameters["profile"].string_value == ";".join(sidecar.profiles)


def test_detector_fp16_keeps_its_huge_batchnorm_variance_in_fp32(tmp_path: Path,
                                                                  corpus_files: dict[str, Path]) -> None:
    """PaddleOCR's detector holds a BatchNorm variance of 9.8e7. Kept in fp32, the fp16 graph answers
    like fp32 on text images; clamped to 65504 (the converter's default) its map is wrong everywhere."""
    from trtpool_builder.graph.onnx_io import save_model
    from trtpool_builder.precision.accuracy import compare, onnxruntime_runner
    from trtpool_builder.precision.fp16_emulation import emulate_fp16
    from trtpool_builder.precision.tensor_probe import name_nodes

    detector = next(m for m in CORPUS if m.name == "ppocr_det")
    source = corpus_files["ppocr_det"]
    calib = _calibration(detector, source, tmp_path)
    result = build_engine(source, tmp_path / "det.plan", BuildOptions(
        trt_module="tensorrt_rtx", shapes=detector.profile_texts(), precision="fp16", calib=calib))
    kept = read_sidecar(result.engine).precision.kept_fp32
    assert "p2o.BatchNormalization.1" in kept
    assert result.accuracy.max_error < 0.05
    model = onnx.load(str(source))
    name_nodes(model)
    clamped = save_model(emulate_fp16(model, kept=()), tmp_path / "clamped.onnx")
    feed = detector.make_inputs(detector.shapes[1], np.random.default_rng(0))
    naive = compare(onnxruntime_runner(source), onnxruntime_runner(clamped), [feed], "fp32", "fp16 as converted")
    assert naive.max_error > 0.5
