"""The Python backend's own ceiling: a model that does no work. Each request is
answered with zeros of the output's shape (a ResNet-50's 1000 logits per
image), sliced from one array made at load, so what it measures is Triton's
and the stub's cost per request and nothing of a model's.

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
        [output] = config["output"]
        self.input_name = config["input"][0]["name"]
        self.output_name = output["name"]
        self.zeros = np.zeros([max(1, int(config["max_batch_size"])), *map(int, output["dims"])], np.float32)
        self.send = parameters.get("answer", "return") == "send"
        self.senders = ThreadPoolExecutor(int(parameters.get("send_threads", "1")))

    def _response(self, request):
        batch = pb_utils.get_input_tensor_by_name(request, self.input_name).shape()[0]
        return pb_utils.InferenceResponse([pb_utils.Tensor(self.output_name, self.zeros[:batch])])

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
