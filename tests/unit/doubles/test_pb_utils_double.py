"""The pb_utils double (tests/doubles/pb_utils_double.py) held to the real module.

A plain Python-backend model (no trtpool) on a real tritonserver runs
tests/harness/pb_utils_report.py against the stub's own triton_python_backend_utils
and answers with the report; the same functions run here on the double. The double
must define only names the real module has, with the same constants and enum values,
signatures that accept no call the real one refuses, and the same behaviour: what
each call returns, which exception it raises and, for the stub's own refusals, the
message. This proves the double says what the stub does; it proves nothing about trtpool.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.doubles import pb_utils_double
from tests.harness import pb_utils_report
from tests.harness.pb_utils_report import INBOUND_BF16, INBOUND_BYTES, INBOUND_FLOATS, INBOUND_PARAMETERS, REACHED
from tests.harness.python_model import python_model, tensor
from trtpool.triton import bfloat16

MODEL = Path(pb_utils_report.__file__).read_text() + f'''

import triton_python_backend_utils as pb_utils

NAMES = {pb_utils_double.__all__!r}


class TritonPythonModel:
    def initialize(self, args):
        self.answered = None

    def execute(self, requests):
        request = requests[0]
        if json.loads(request.parameters()).get("answer_twice"):
            self.answered = answer_twice(pb_utils, request)
            return None   # answered through the sender
        found = report(pb_utils, NAMES, request, self.answered)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("REPORT", np.array([found.encode()], dtype=object))])]
'''


@pytest.fixture(scope="module")
def real(start_server, tmp_path_factory) -> dict[str, Any]:
    """The real pb_utils' report, from tritonserver 2.51's stub."""
    repo = tmp_path_factory.mktemp("pb_utils_report")
    python_model(repo, "pb_utils_report", MODEL,
                 [tensor("X", "BYTES", [-1]), tensor("F", "FP32", [2]), tensor("B", "BF16", [2])],
                 [tensor("REPORT", "BYTES", [1])])
    server = start_server(repo)
    sent = {"X": np.array(INBOUND_BYTES, dtype=object), "F": np.array(INBOUND_FLOATS, np.float32),
            "B": np.array(INBOUND_BF16, ml_dtypes.bfloat16)}
    inputs = []
    for name, triton_type in (("X", "BYTES"), ("F", "FP32"), ("B", "BF16")):
        inputs.append(httpclient.InferInput(name, list(sent[name].shape), triton_type))
        inputs[-1].set_data_from_numpy(sent[name])
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.infer("pb_utils_report", inputs, parameters={"answer_twice": True})
        answer = client.infer("pb_utils_report", inputs, parameters=INBOUND_PARAMETERS)
    return json.loads(answer.as_numpy("REPORT")[0].decode())


@pytest.fixture(scope="module")
def double() -> dict[str, Any]:
    """The double's report, from the same functions, on requests built as the stub hands them over."""
    pb = pb_utils_double
    pb._reset()

    def request(parameters: dict[str, Any]) -> Any:
        inputs = [pb.Tensor("X", np.array(INBOUND_BYTES, dtype=object)),
                  pb.Tensor("F", np.array(INBOUND_FLOATS, np.float32)),
                  bfloat16.to_triton(pb, "B", np.array(INBOUND_BF16, ml_dtypes.bfloat16))]
        return pb.InferenceRequest(model_name="pb_utils_report", inputs=inputs, requested_output_names=["REPORT"],
                                   parameters=parameters)

    answered = pb_utils_report.answer_twice(pb, request({"answer_twice": True}))
    found = json.loads(pb_utils_report.report(pb, pb.__all__, request(INBOUND_PARAMETERS), answered))
    pb._reset()
    return found


def test_the_double_makes_public_only_what_pb_utils_has(real):
    double = pb_utils_double
    defined = {name for name, value in vars(double).items() if not name.startswith("_") and (
        type(value) in (int, str) or (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == double.__name__)}
    assert defined == set(double.__all__)   # nothing public escapes the comparison below
    assert set(double.__all__) - set(real["surface"]["module"]) == set()


def incompatible(double: list[dict[str, Any]], real: list[dict[str, Any]]) -> list[str]:
    """How a signature of the double would take a call that the real one refuses.

    Each parameter of the double matches the real one of its name (one passed by keyword) or
    of its position (positional-only): a parameter the double may take by keyword must have that
    name in the real signature and be keyword-able there; one it takes by position must sit at
    the same position; an optional one must be optional in the real too, with the same default
    where the real default is a literal; and every parameter the real requires, the double requires."""
    problems = [f"takes {p['name']}" for p in double if p["name"].startswith("*")]
    by_name = {p["name"]: p for p in real}
    matched = []
    for index, mine in enumerate(p for p in double if not p["name"].startswith("*")):
        theirs = by_name.get(mine["name"]) if mine["keyword"] else (real[index] if index < len(real) else None)
        if theirs is None or not theirs["keyword"] and mine["keyword"]:
            problems.append(f"{mine['name']}: no such keyword-able parameter in the real signature")
            continue
        if mine["positional"] and (index >= len(real) or real[index] is not theirs):
            problems.append(f"{mine['name']}: at position {index}, unlike the real signature")
        if mine["default"] is not None and theirs["default"] is None:
            problems.append(f"{mine['name']}: optional, but required in the real signature")
        if None not in (mine["default"], theirs["default"]) and "<object>" not in (mine["default"], theirs["default"]) \
                and mine["default"] != theirs["default"]:
            problems.append(f"{mine['name']}: default {mine['default']}, the real {theirs['default']}")
        matched.append(theirs["name"])
    problems += [f"{p['name']}: required by the real signature, not by the double"
                 for p in real if p["default"] is None and p["name"] not in matched]
    return problems


@pytest.mark.parametrize("name", [*pb_utils_double.__all__, *REACHED])
def test_each_class_has_the_real_attributes_constants_and_signatures(real, double, name):
    mine, theirs = double["surface"][name], real["surface"][name]
    if "class" not in mine:   # an exception (its bases) or a constant
        assert mine == theirs
        return
    mine, theirs = mine["class"], theirs["class"]
    assert set(mine) - set(theirs) == set(), "attributes the real class lacks"
    for attribute, described in mine.items():
        if "parameters" in described:
            assert incompatible(described["parameters"], theirs[attribute]["parameters"]) == [], \
                (attribute, described, theirs[attribute])
        else:
            assert described == theirs[attribute], attribute


@pytest.mark.parametrize("part", ["tensor", "error", "response", "request", "metric", "logger", "final flag"])
def test_the_double_behaves_as_the_stub(real, double, part):
    mine, theirs = double["behaviour"][part], real["behaviour"][part]
    if isinstance(mine, dict):   # each difference, the double's answer beside the stub's
        assert {key: {"double": mine.get(key), "stub": theirs.get(key)}
                for key in {*mine, *theirs} if mine.get(key) != theirs.get(key)} == {}
    assert mine == theirs


def test_a_request_arrives_and_is_answered_as_from_the_stub(real, double):
    """BYTES as bytes objects, FP32 as numpy, BF16 refused by as_numpy() and read through
    DLPack; parameters as JSON; a sender that takes one final response and refuses the next."""
    assert double["inbound"] == real["inbound"]
    assert double["answered"] == real["answered"]
    assert real["answered"]["second"]["raises"] == "TritonModelException"
