"""trtpool-tune's check of the client profile against the config Triton serves (as
get_model_config returns it): each refusal names the input and what it expects."""
from __future__ import annotations

import pytest

from trtpool_ops.tune.profile import ClientProfile, ProfileError, check

BERT = {
    "max_batch_size": 32,
    "input": [{"name": "input_ids", "data_type": "TYPE_INT64", "dims": ["-1"]},
              {"name": "attention_mask", "data_type": "TYPE_INT64", "dims": ["-1"]}],
    "parameters": {"profile": {"string_value": "input_ids=1x1:8x128:32x512,attention_mask=1x1:8x128:32x512"}},
}
BOTH = ("input_ids:128", "attention_mask:128")


def test_a_profile_the_model_takes_passes():
    check(ClientProfile(batch=32, shapes=BOTH), BERT, "bert")
    check(ClientProfile(input_data="inputs.json"), BERT, "bert")   # the file's shapes: perf_analyzer checks them


def test_inputs_without_a_shape_take_the_profiles_opt_shape_all_at_once():
    """Issue 37: the tuner measures at what the model's profile was built for instead of refusing
    one input at a time."""
    assert check(ClientProfile(), BERT, "bert").shapes == ("input_ids:128", "attention_mask:128")
    assert check(ClientProfile(shapes=("input_ids:64",)), BERT, "bert").shapes == ("input_ids:64", "attention_mask:128")
    unbatched = {"max_batch_size": 0, "input": [{"name": "input", "dims": ["-1", "-1"]},
                                                {"name": "state", "dims": ["2", "-1", "128"]}],
                 "parameters": {"profile": {"string_value": "input=1x576:1x576:8x576,state=2x1x128:2x1x128:2x8x128"}}}
    assert check(ClientProfile(), unbatched, "vad").shapes == ("input:1,576", "state:2,1,128")


def test_inputs_the_profile_gives_no_shape_are_named_together_with_an_example_for_each():
    bare = {**BERT, "parameters": {}}
    with pytest.raises(ProfileError) as refused:
        check(ClientProfile(), bare, "bert")
    assert str(refused.value) == ("input(s) 'input_ids' [-1], 'attention_mask' [-1] have variable dimensions and the "
                                  "model's profile gives no shape for them: give one for each input, e.g. "
                                  "--shape input_ids:1 --shape attention_mask:1")


@pytest.mark.parametrize("profile, message", [
    (ClientProfile(shapes=("input_ids:128,2", "attention_mask:128")),
     "--shape input_ids:128,2: input 'input_ids' expects dims [-1]"),
    (ClientProfile(shapes=("input_ids:600", "attention_mask:600")),
     "--shape input_ids:600 at --batch 1: input 'input_ids' takes shapes 1x1 to 32x512 (the model's profiles)"),
    (ClientProfile(batch=33, shapes=BOTH), "--batch 33: model 'bert' takes batches up to max_batch_size 32"),
    (ClientProfile(shapes=("token_ids:128",)), "--shape token_ids: model 'bert' has no input 'token_ids'; "
                                               "its inputs are attention_mask, input_ids"),
    (ClientProfile(shapes=("input_ids",)), "--shape input_ids: expected NAME:D1,D2,..."),
])
def test_a_profile_the_model_cannot_take_is_refused_by_name(profile, message):
    with pytest.raises(ProfileError) as refused:
        check(profile, BERT, "bert")
    assert message in str(refused.value)


def test_an_unbatched_model_takes_batch_1_only():
    with pytest.raises(ProfileError, match=r"--batch 4: model 'm' does not batch \(max_batch_size 0\); use --batch 1"):
        check(ClientProfile(batch=4), {"max_batch_size": 0, "input": []}, "m")
