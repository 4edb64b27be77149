"""trtpool.model.validate.accept: its memory of accepted request layouts never lets a bad request through."""
from __future__ import annotations

import numpy as np
import pytest

from trtpool.model import validate
from trtpool.errors import InvalidInput
from trtpool.model.signature import Profile, ShapeRange, Signature, TensorSpec


def signature() -> Signature:
    ranges = {"x": ShapeRange((1, 4), (8, 4), (8, 4)), "ids": ShapeRange((1, 2), (8, 16), (8, 16))}
    return Signature(inputs=(TensorSpec("x", np.dtype(np.float32), (-1, 4)),
                             TensorSpec("ids", np.dtype(np.int64), (-1, -1))),
                     outputs=(TensorSpec("y", np.dtype(np.float32), (-1, 4)),),
                     profiles=(Profile(0, ranges),), batched=True)


def request(rows: int = 2, tokens: int = 5, x_dtype=np.float32) -> dict[str, np.ndarray]:
    return {"x": np.zeros((rows, 4), x_dtype), "ids": np.zeros((rows, tokens), np.int64)}


def test_an_accepted_layout_is_accepted_again_without_the_walk(monkeypatch):
    model = signature()
    _, shapes = validate.accept(model, request())
    assert shapes == {"x": (2, 4), "ids": (2, 5)}
    walks = []
    monkeypatch.setattr(validate, "check_request", lambda *args: walks.append(args) or {})
    _, again = validate.accept(model, request())   # new arrays, same layout
    assert again == shapes and walks == []
    validate.accept(model, request(rows=3))        # a new layout is checked
    assert len(walks) == 1


@pytest.mark.parametrize("bad, message", [
    (request(x_dtype=np.float16), "data type FP16 given, expected FP32"),
    (request(tokens=17), "'ids'"),
    (request(rows=9), "outside 1..8"),
    ({"x": np.zeros((2, 4), np.float32)}, "missing input"),
])
def test_a_request_that_differs_from_an_accepted_one_is_still_refused(bad, message):
    model = signature()
    validate.accept(model, request())
    with pytest.raises(InvalidInput, match=message):
        validate.accept(model, bad)
    with pytest.raises(InvalidInput, match=message):   # refusals are not remembered as accepted
        validate.accept(model, bad)


def test_the_memory_is_bounded(monkeypatch):
    model = signature()
    monkeypatch.setattr(validate, "MAX_REMEMBERED_LAYOUTS", 3)
    for tokens in range(2, 10):
        validate.accept(model, request(tokens=tokens))
        assert len(model.accepted_layouts) <= 3
