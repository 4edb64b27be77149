"""A plain Python-backend decoupled model that refuses some requests: what the gRPC stream tests
of Triton's own limits (tests/reliability/test_grpc_error_stream_abort.py, bench/grpc_error_header.py)
serve. Every request's answer comes from one thread after execute returns, as trtpool's workers
answer a batch: a request whose first element is negative gets an error, the others their input back."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.harness.python_model import python_model, tensor

MODEL = "refusing_decoupled"
WIDTH = 256
CODE = '''
import threading
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        work = [(r.get_response_sender(), pb_utils.get_input_tensor_by_name(r, "X").as_numpy()) for r in requests]
        def answer():
            for sender, x in work:
                if x.flat[0] < 0:
                    reply = pb_utils.InferenceResponse(error=pb_utils.TritonError("refused", pb_utils.TritonError.INVALID_ARG))
                else:
                    reply = pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)])
                sender.send(reply, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        threading.Thread(target=answer, daemon=True).start()
        return None
'''


def write_refusing_model(repo: Path) -> None:
    python_model(repo, MODEL, CODE, [tensor("X", "FP32", [WIDTH])], [tensor("Y", "FP32", [WIDTH])],
                 max_batch_size=64, extra="model_transaction_policy { decoupled: true }\ndynamic_batching { }")


def refusing_request(index: int, refused: bool) -> dict[str, np.ndarray]:
    """Four rows of `index` (the answer echoes them), or of -1 where the model is to refuse it."""
    return {"X": np.full((4, WIDTH), -1.0 if refused else float(index), np.float32)}
