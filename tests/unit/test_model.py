"""backend_src/model.py, trtpool's entry point, loaded with the pb_utils double in place of
triton_python_backend_utils: Triton's log levels, and one sync instance from initialize through
execute to finalize on the tiny example (ONNX Runtime). tests/e2e runs it inside tritonserver."""
from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.harness.repository import add_example
from trtpool_builder.examples.tiny import tiny_reference
from trtpool_builder.folder.load_check import as_triton_hands_it
from trtpool_builder.folder.model_folder import read_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def model_module(pb_utils) -> ModuleType:
    """model.py imported afresh (it imports pb_utils when it loads); the trtpool logger's handlers
    as they were afterwards (initialize adds Triton's)."""
    trtpool_log = logging.getLogger("trtpool")
    handlers, level = list(trtpool_log.handlers), trtpool_log.level
    spec = importlib.util.spec_from_file_location("trtpool_model_under_test", ROOT / "backend_src" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    trtpool_log.handlers[:] = handlers
    trtpool_log.setLevel(level)


def test_the_log_handler_keeps_each_records_level(pb_utils, model_module):
    handler = model_module._TritonLogHandler()
    for level in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG):
        handler.emit(logging.LogRecord("trtpool", level, __file__, 1, f"at {level}", None, None))
    levels = pb_utils.Logger
    assert pb_utils._logged == [(levels.ERROR, "at 50"), (levels.ERROR, "at 40"), (levels.WARNING, "at 30"),
                                (levels.INFO, "at 20"), (levels.VERBOSE, "at 10")]


def test_a_sync_instance_from_initialize_to_finalize(pb_utils, model_module, tmp_path):
    folder = add_example(tmp_path / "repo", tmp_path / "cache", "tiny", contexts="1")   # metrics every second
    model = model_module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(as_triton_hands_it(read_config(folder))),
                      "model_instance_kind": "CPU", "model_instance_device_id": "0",
                      "model_repository": str(folder), "model_version": "1", "model_name": "tiny"})
    assert any("tiny" in message for _, message in pb_utils._logged)   # trtpool's log goes to Triton's
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    good = pb_utils.InferenceRequest(model_name="tiny", inputs=[pb_utils.Tensor("INPUT0", x)],
                                     requested_output_names=["OUTPUT0"])
    bad = pb_utils.InferenceRequest(model_name="tiny", inputs=[pb_utils.Tensor("INPUT0", x.astype(np.float16))],
                                    requested_output_names=["OUTPUT0"])
    answered, refused = model.execute([good, bad])
    np.testing.assert_allclose(answered.output_tensors()[0].as_numpy(), tiny_reference(x), rtol=1e-5, atol=1e-5)
    assert refused.error().code() == pb_utils.TritonError.INVALID_ARG
    assert refused.error().message() == "input 'INPUT0': data type FP16 given, expected FP32"
    thread = model.metrics._thread
    model.finalize()   # stops the metrics thread; its last flush hands over the batch
    assert not thread.is_alive()
    batches = pb_utils._families["trtpool_batches_total"].series
    assert batches == {(("batch_size", "2"), ("model", "tiny")): 1.0}
