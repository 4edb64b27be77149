"""Which of a process file's faces serve: the per-request functions or the batch ones.

A face is one of the two forms each side of a process file may take: ``preprocess`` or
``preprocess_batch``, ``postprocess`` or ``postprocess_batch``. The parameter
``process_faces`` prefers one form; a face the file lacks gives way to the other of its side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trtpool.process.file import ProcessFile


@dataclass(frozen=True)
class Faces:
    """Which of a process file's faces serve: the batch face (True) or the per-request one."""

    batch_pre: bool = False
    batch_post: bool = False


def choose_faces(process: ProcessFile, wanted: str, device: str) -> Faces:
    """`wanted` is the parameter process_faces: "batch" or "request" prefers those faces,
    "auto" the batch faces on a GPU instance (decode on the device) and the per-request
    faces on a CPU one (requests in parallel on the pre workers). A face the file lacks
    gives way to the other of its side."""
    prefer_batch = wanted == "batch" or (wanted == "auto" and device != "cpu")

    def batch(per_request: Callable | None, whole_batch: Callable | None) -> bool:
        return whole_batch is not None and (per_request is None or prefer_batch)

    return Faces(
        batch(process.preprocess, process.preprocess_batch), batch(process.postprocess, process.postprocess_batch)
    )
