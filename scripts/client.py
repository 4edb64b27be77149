"""Send one request to a served model and print what came back.

    python scripts/client.py --model resnet50 --protocol grpc --url 127.0.0.1:8001
    python scripts/client.py --model resnet50_jpeg --file model_repository/resnet50_jpeg/sample.jpg

Numeric inputs get random values of the model's shape; an input of bytes (TYPE_STRING, e.g. an
encoded image or a text) gets the contents of --file, as shape [batch, 1].
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import triton_to_np_dtype


def random_input(spec: dict, batch: int, rng: np.random.Generator) -> np.ndarray:
    dims = [16 if int(d) == -1 else int(d) for d in spec["dims"]]  # e.g. a 16-token sequence
    dtype = triton_to_np_dtype(spec["data_type"].removeprefix("TYPE_"))
    shape = [batch, *dims]
    if np.issubdtype(dtype, np.integer):
        high = 30522 if spec["name"] == "input_ids" else 2
        return rng.integers(0, high, size=shape).astype(dtype) if high > 2 else np.ones(shape, dtype)
    return rng.standard_normal(shape).astype(dtype)


def bytes_input(spec: dict, batch: int, file: Path | None, model: str) -> np.ndarray:
    """The file's bytes, once per row: what a model with a process file takes (IMAGE, TEXT)."""
    if file is None:
        raise SystemExit(
            f"client.py: model '{model}' takes input '{spec['name']}' as bytes (BYTES of shape "
            f"[N, 1]: an encoded image, a text): give the file to send with --file PATH (the "
            f"examples' folder has one: model_repository/{model}/sample.*)"
        )
    dims = [1 if int(d) == -1 else int(d) for d in spec["dims"]]
    return np.full([batch, *dims], file.read_bytes(), dtype=np.object_)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="grpc")
    parser.add_argument("--url", default=None, help="host:port (default 127.0.0.1:8000 for http, :8001 for grpc)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument(
        "--file", type=Path, help="what an input of bytes gets (a JPEG for resnet50_jpeg, a text for bert_text)"
    )
    args = parser.parse_args()
    module = grpcclient if args.protocol == "grpc" else httpclient
    url = args.url or ("127.0.0.1:8001" if args.protocol == "grpc" else "127.0.0.1:8000")
    client = module.InferenceServerClient(url)
    config = client.get_model_config(args.model, **({"as_json": True} if args.protocol == "grpc" else {}))
    config = config.get("config", config)
    rng = np.random.default_rng(0)
    inputs = []
    for spec in config["input"]:
        datatype = spec["data_type"].removeprefix("TYPE_")
        if datatype == "STRING":
            array, datatype = bytes_input(spec, args.batch, args.file, args.model), "BYTES"
        else:
            array = random_input(spec, args.batch, rng)
        tensor = module.InferInput(spec["name"], list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(args.model, inputs)
    for spec in config["output"]:
        out = result.as_numpy(spec["name"])
        print(f"{spec['name']}: shape {list(out.shape)} dtype {out.dtype} first values {out.ravel()[:5]}")


if __name__ == "__main__":
    main()
