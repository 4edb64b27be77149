"""The Python backend's own ceiling: a model that does no work. Each request is
answered with zeros of each output's shape (a ResNet-50's 1000 logits per
image; a dimension the config leaves open takes the first input's size in the
same place, as BERT's sequence), made once per shape, so what it measures is
Triton's and the stub's cost per request and nothing of a model's.

Parameter `answer`: `return` (default) returns the responses from execute(),
one round trip to the server for the whole batch; `send` answers each request
through its response sender (a round trip each), from `send_threads` threads:
the ceiling of any design that answers after execute() has returned.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.input_name = config["input"][0]["name"]
        self.outputs = [
            (o["name"], [int(d) for d in o["dims"]], pb_utils.triton_string_to_numpy(o["data_type"]))
            for o in config["output"]
        ]
        self.zeros = {}  # (shape, dtype) -> zeros of them
        self.send = parameters.get("answer", "return") == "send"
        self.senders = ThreadPoolExecutor(int(parameters.get("send_threads", "1")))

    def _zeros(self, shape, dtype):
        if (shape, dtype) not in self.zeros:
            self.zeros[shape, dtype] = np.zeros(shape, dtype)
        return self.zeros[shape, dtype]

    def _response(self, request):
        batch, *sizes = pb_utils.get_input_tensor_by_name(request, self.input_name).shape()
        tensors = []
        for name, dims, dtype in self.outputs:
            shape = (batch, *(sizes[i] if d < 0 and i < len(sizes) else max(d, 1) for i, d in enumerate(dims)))
            tensors.append(pb_utils.Tensor(name, self._zeros(shape, dtype)))
        return pb_utils.InferenceResponse(tensors)

    def _send(self, request):
        request.get_response_sender().send(self._response(request), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests):
        if not self.send:
            return [self._response(request) for request in requests]
        for request in requests:
            self.senders.submit(self._send, request)
        return None

    def finalize(self):
        self.senders.shutdown(wait=True)
