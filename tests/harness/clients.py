"""Small helpers for building tritonclient inputs in tests."""
from __future__ import annotations

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

TINY_TOLERANCE = dict(rtol=1e-5, atol=1e-5)     # float32 served vs float64 numpy
LARGE_TOLERANCE = dict(rtol=1e-4, atol=1e-4)    # served vs in-process ONNX Runtime, float32 both


def http_input(name: str, array: np.ndarray, dtype: str) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return tensor


def grpc_input(name: str, array: np.ndarray, dtype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return tensor


def infer_concurrently(url: str, model: str, inputs: list[np.ndarray], workers: int = 16,
                       name: str = "INPUT0", output: str = "OUTPUT0", *, protocol: str = "grpc",
                       dtype: str = "FP32", outputs: tuple[str, ...] = ()) -> list:
    """One client per request (`protocol` "grpc" or "http"), `workers` at a time: each request's
    `output`, or with `outputs` a dict of those by name; or the error it got."""
    from concurrent.futures import ThreadPoolExecutor

    from tritonclient.utils import InferenceServerException

    module, make_input = (httpclient, http_input) if protocol == "http" else (grpcclient, grpc_input)

    def one(x: np.ndarray) -> np.ndarray | dict[str, np.ndarray] | Exception:
        client = module.InferenceServerClient(url)
        try:
            result = client.infer(model, [make_input(name, x, dtype)])
            return {out: result.as_numpy(out) for out in outputs} if outputs else result.as_numpy(output)
        except InferenceServerException as exc:
            return exc
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, inputs))
