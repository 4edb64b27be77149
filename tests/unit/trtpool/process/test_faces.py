"""trtpool.process.faces: which of a process file's faces serve, by the parameter process_faces and
the instance's device, a missing face giving way to the other."""
from __future__ import annotations

from pathlib import Path

import pytest

from trtpool.process.faces import Faces, choose_faces
from trtpool.process.file import ProcessFile


@pytest.mark.parametrize("wanted, device, batch_pre, batch_post", [
    ("auto", "cpu", False, False), ("auto", "cuda:0", True, True),
    ("batch", "cpu", True, True), ("request", "cuda:0", False, False),
])
def test_choose_faces_follows_the_parameter_and_the_device(wanted, device, batch_pre, batch_post):
    both = ProcessFile(Path("process.py"), print, print, print, print)
    assert choose_faces(both, wanted, device) == Faces(batch_pre, batch_post)
    only_batch = ProcessFile(Path("process.py"), None, None, print, print)
    assert choose_faces(only_batch, wanted, device) == Faces(True, True)  # a missing face gives way
    only_request = ProcessFile(Path("process.py"), print, print)
    assert choose_faces(only_request, wanted, device) == Faces(False, False)
