from __future__ import annotations

import numpy as np
import pytest

from trtpool.errors import ConfigError
from trtpool.model.signature import ShapeRange, TensorSpec, is_batched
from trtpool_builder.graph.profiles import batch_only_profile, opt_batch, resolve_profiles

IDS = TensorSpec("input_ids", np.dtype(np.int64), (-1, -1))
MASK = TensorSpec("attention_mask", np.dtype(np.int64), (-1, -1))
IMAGE = TensorSpec("input", np.dtype(np.float32), (-1, 3, 64, 64))
FIXED = TensorSpec("scale", np.dtype(np.float32), (4,))


def test_several_profiles_and_fixed_inputs_filled_in() -> None:
    profiles = resolve_profiles(
        ["input_ids=1x1:8x128:32x512,attention_mask=1x1:8x128:32x512",
         "input_ids=1x1:1x16:4x16,attention_mask=1x1:1x16:4x16"], [IDS, MASK, FIXED])
    assert [p.index for p in profiles] == [0, 1]
    assert profiles[1].ranges["input_ids"] == ShapeRange((1, 1), (1, 16), (4, 16))
    assert profiles[0].ranges["scale"] == ShapeRange((4,), (4,), (4,))
    (batched,) = resolve_profiles(["input_ids=1x1:8x128:32x512,attention_mask=1x1:8x128:32x512"], [IDS, MASK])
    assert opt_batch(batched) == 8 and batched.max_batch() == 32


def test_static_model_needs_no_shapes() -> None:
    (profile,) = resolve_profiles([], [FIXED])
    assert profile.ranges["scale"].max == (4,)


@pytest.mark.parametrize("texts, message", [
    ([], r"inputs \['input_ids', 'attention_mask'\] have dynamic dimensions .*--shapes "
         r"input_ids=1x64:8x128:32x256,attention_mask=1x64:8x128:32x256 "),
    (["input_ids=1x1:8x128:32x512"], r"no shape range for dynamic input\(s\) \['attention_mask'\]"),
    (["input_ids=1x1:2x2:4x4,attention_mask=1x1:2x2:4x4,token_type_ids=1x1:2x2:4x4"],
     r"the model has no input\(s\) \['token_type_ids'\]; its inputs are \['input_ids', 'attention_mask'\]"),
    (["input_ids=1x1x1:2x2x2:4x4x4,attention_mask=1x1:2x2:4x4"],
     r"input 'input_ids' has rank 2 \(shape \[-1, -1\]\) but the profile gives rank 3"),
    (["input_ids=1x8:2x4:4x4,attention_mask=1x1:2x2:4x4"], r"need MIN <= OPT <= MAX"),
])
def test_impossible_shapes_are_named(texts: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_profiles(texts, [IDS, MASK])


def test_a_range_is_chosen_only_for_a_batch_axis_alone() -> None:
    assert batch_only_profile([IMAGE]) == "input=1x3x64x64:8x3x64x64:32x3x64x64"
    assert batch_only_profile([IMAGE], largest=4) == "input=1x3x64x64:4x3x64x64:4x3x64x64"
    for inputs in ([IDS, MASK], [IMAGE, FIXED], []):   # other dynamic axes; an input without one; no inputs
        assert batch_only_profile(inputs) is None


def test_fixed_dimension_must_match() -> None:
    with pytest.raises(ConfigError, match=r"input 'input' dimension 2 is fixed at 64 in the model but the profile gives 32\.\.32"):
        resolve_profiles(["input=1x3x32x32:8x3x32x32:32x3x32x32"], [IMAGE])


def test_batched_only_when_every_tensor_has_a_dynamic_first_dim() -> None:
    out = TensorSpec("logits", np.dtype(np.float32), (-1, 1000))
    assert is_batched([IMAGE], [out])
    assert not is_batched([IMAGE, FIXED], [out])


def test_a_scalar_input_round_trips_through_the_profile_text() -> None:
    """silero VAD's sample rate is an int64 scalar: its (filled-in) range must survive the text form
    that the sidecar and config.pbtxt carry."""
    from trtpool.model.shapes import format_profile, parse_profile

    audio = TensorSpec("input", np.dtype(np.float32), (-1, 512))
    rate = TensorSpec("sr", np.dtype(np.int64), ())
    (profile,) = resolve_profiles(["input=1x512:1x512:8x512"], [audio, rate])
    text = format_profile(profile.ranges)
    assert text == "input=1x512:1x512:8x512,sr=::"
    assert parse_profile(text) == profile.ranges
    assert parse_profile("sr=")["sr"] == ShapeRange((), (), ())
