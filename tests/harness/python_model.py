"""Plain Python-backend model folders (no trtpool): the tests and benchmarks that show what
tritonserver itself does write their models with these."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def tensor(name: str, triton_type: str, dims: Sequence[int]) -> str:
    """One config.pbtxt input or output entry; `triton_type` as the client API names it (FP32, BYTES)."""
    data_type = "TYPE_" + triton_type.replace("BYTES", "STRING")
    return f'{{ name: "{name}" data_type: {data_type} dims: [ {", ".join(str(d) for d in dims)} ] }}'


def python_model(repo: Path, name: str, code: str, inputs: Sequence[str], outputs: Sequence[str],
                 max_batch_size: int = 0, extra: str = "") -> Path:
    """repo/name: 1/model.py holding `code`, and a config.pbtxt with the entries given (tensor())
    and `extra` config lines (a transaction policy, an instance group, parameters). The version folder."""
    version = repo / name / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(code)
    text = f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
    if extra:
        text += extra.rstrip("\n") + "\n"
    if inputs:
        text += f"input [ {', '.join(inputs)} ]\n"
    text += f"output [ {', '.join(outputs)} ]\n"
    (repo / name / "config.pbtxt").write_text(text)
    return version
