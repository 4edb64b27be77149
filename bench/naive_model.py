"""The pattern ../shared/background.md warns against, as a baseline: a plain
Python-backend model that runs each request alone on one ONNX Runtime session,
with fresh input and output arrays per request, no pool and no batching."""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.output_names = [o["name"] for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {t.name(): np.array(t.as_numpy()) for t in request.inputs()}
            outputs = self.session.run(self.output_names, feeds)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, o) for n, o in zip(self.output_names, outputs, strict=True)]
                )
            )
        return responses
