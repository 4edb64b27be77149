"""trtpool.modes.front.check_front in-process: the cases a real server cannot show side by
side (test_refused_at_load shows the others through tritonserver)."""
from __future__ import annotations

from pathlib import Path

import pytest

from trtpool.errors import ConfigError
from trtpool.modes.front import DEFAULT_FORWARD_TIMEOUT_S, check_front, forward_timeout_s

DECOUPLED = 'backend: "trtpool"\nmodel_transaction_policy { decoupled: true }\n'


def front_config(target: str, **parameters: str) -> dict:
    params = {"forward_to": target, **parameters}
    return {"name": "front", "parameters": {k: {"string_value": v} for k, v in params.items()}}


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    for name, text in {"front": "", "dec": DECOUPLED,
                       "dec_front": DECOUPLED + 'parameters { key: "forward_to" value { string_value: "dec" } }\n',
                       "listed": 'name: "listed"\nbackend: "trtpool"\ninput [ { name: "X" data_type: TYPE_FP32 '
                                 'dims: [ -1 ] } ]\nmodel_transaction_policy: { decoupled: true }\n',
                       "garbled": "backend: trtpool {{"}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(text)
    return tmp_path


def test_a_decoupled_trtpool_target_is_accepted(repository):
    assert check_front(front_config("dec"), repository / "front") == "dec"
    # Triton's list syntax and optional colons parse (the schema is Triton's own).
    assert check_front(front_config("listed"), repository / "front") == "listed"


@pytest.mark.parametrize("target, message", [
    ("dec_front", "'dec_front' is itself a front \\(forward_to 'dec'\\)"),
    ("garbled", "cannot read '.*garbled/config.pbtxt'"),
    ("", "'' is not a model name"),
    ("dec/../dec", "is not a model name"),
])
def test_targets_that_cannot_work_are_refused(repository, target, message):
    with pytest.raises(ConfigError, match=f"parameter 'forward_to': {message}|{message}"):
        check_front(front_config(target), repository / "front")


def test_parameters_of_a_served_model_do_not_apply_to_a_front(repository):
    with pytest.raises(ConfigError, match=r"parameter\(s\) \['contexts', 'mode'\] do not apply to a front"):
        check_front(front_config("dec", mode="decoupled", contexts="2"), repository / "front")


def test_a_front_bounds_its_calls_by_default_and_takes_its_own_bound():
    assert forward_timeout_s(front_config("dec")) == DEFAULT_FORWARD_TIMEOUT_S
    assert forward_timeout_s(front_config("dec", forward_timeout_seconds=" 2.5 ")) == 2.5


@pytest.mark.parametrize("value, message", [
    ("soon", "'soon' is not a number"),
    ("0", "0 is out of range"),
    ("-1", "-1 is out of range"),
    ("1e9", "1e9 is out of range"),
])
def test_a_bound_that_cannot_work_is_refused(value, message):
    with pytest.raises(ConfigError, match=f"parameter 'forward_timeout_seconds': {message}; expected seconds above 0"):
        forward_timeout_s(front_config("dec", forward_timeout_seconds=value))


def test_a_bound_is_a_front_parameter(repository):
    assert check_front(front_config("dec", forward_timeout_seconds="5"), repository / "front") == "dec"
