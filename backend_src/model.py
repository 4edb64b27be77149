"""trtpool's Triton entry point: thin glue between Triton and trtpool.

Triton finds this file as <backend-dir>/trtpool/model.py when a model's
config.pbtxt says backend: "trtpool"; model folders carry no model.py.
"""
import json
import logging
from pathlib import Path

import triton_python_backend_utils as pb_utils

from trtpool.errors import TrtpoolError
from trtpool.instance import ModelInstance, describe
from trtpool.metrics import PoolMetrics
from trtpool.model_config import completion


class _TritonLogHandler(logging.Handler):
    """Route the trtpool logger into Triton's log."""

    def emit(self, record: logging.LogRecord) -> None:
        level = pb_utils.Logger.WARNING if record.levelno >= logging.WARNING else pb_utils.Logger.INFO
        pb_utils.Logger.log(self.format(record), level)


def _stub_version_dir() -> Path:
    """The model's version folder. auto_complete_config gets no path, but the
    Python backend starts its stub with <repo>/<model>/<version>/model.py as
    the first argument (tritonserver 2.51)."""
    with open("/proc/self/cmdline", "rb") as cmdline:
        return Path(cmdline.read().split(b"\0")[1].decode()).parent


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        filled = completion(describe(config, _stub_version_dir()))
        if not config.get("max_batch_size") and filled["max_batch_size"]:
            auto_complete_model_config.set_max_batch_size(filled["max_batch_size"])
        if filled["max_batch_size"]:
            auto_complete_model_config.set_dynamic_batching()
        for section, add in (("input", auto_complete_model_config.add_input),
                             ("output", auto_complete_model_config.add_output)):
            if not config.get(section):
                for entry in filled[section]:
                    add(entry)
        return auto_complete_model_config

    def initialize(self, args):
        logger = logging.getLogger("trtpool")
        if not logger.handlers:
            logger.addHandler(_TritonLogHandler())
            logger.setLevel(logging.INFO)
        model_config = json.loads(args["model_config"])
        device = "cuda:" + args["model_instance_device_id"] if args["model_instance_kind"] == "GPU" else "cpu"
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self.metrics = PoolMetrics(pb_utils.MetricFamily, model_config["name"])
        try:
            self.instance = ModelInstance(model_config, version_dir, device, self.metrics.record_batch)
        except TrtpoolError as exc:
            raise pb_utils.TritonModelException(f"trtpool: {exc}") from exc
        self.input_names = [s.name for s in self.instance.runtime.signature.inputs]

    def execute(self, requests):
        responses = [None] * len(requests)

        def emit(index, outputs):
            # pb_utils.Tensor keeps a reference until execute returns, and the
            # context's output buffer is reused as soon as it is released: copy.
            tensors = [pb_utils.Tensor(name, array.copy()) for name, array in outputs.items()]
            responses[index] = pb_utils.InferenceResponse(output_tensors=tensors)

        def fail(index, error):
            responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error)))

        batch = [
            {t.name(): t.as_numpy() for t in request.inputs()} for request in requests
        ]
        self.instance.runner.run(batch, emit, fail)
        self.metrics.publish(self.instance.pool.stats)
        return responses

    def finalize(self):
        self.instance.close()
