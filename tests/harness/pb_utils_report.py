"""What a pb_utils module is and does, as plain data: the same functions run on the real
module inside a Python-backend stub and on tests/doubles/pb_utils_double.py in-process, and
tests/unit/doubles/test_pb_utils_double.py compares the two.

This file is also the source of that stub's model: it imports only the standard library,
numpy, ml_dtypes and trtpool.triton.bfloat16 (which makes BF16 tensors through DLPack), all in the
serving environment.

- surface(pb_utils, names): for each name, what it is; for a class, its public attributes:
  a method's parameters (from inspect, or from the signature pybind writes into the
  docstring), a constant's value. The response sender and the metric, which pb_utils
  names nowhere, are reached through a request and a family.
- behaviour(pb_utils): what each call returns or how it refuses (the exception's type and,
  for the stub's own refusals, its message; pybind's TypeError wording is left out).
- inbound(request) and answer_twice(pb_utils, request): a request as execute() receives it,
  and its response sender answering twice.
"""
from __future__ import annotations

import gc
import inspect
import json
import re
from typing import Any, Callable

import ml_dtypes
import numpy as np

REACHED = ("InferenceResponseSender", "Metric")   # classes pb_utils has no name for
INBOUND_PARAMETERS = {"trtpool_probe": True, "n": 3}
INBOUND_BYTES = [b"ab", "\u00e9".encode()]
INBOUND_FLOATS = [1.5, 2.0]
INBOUND_BF16 = [0.5, 3.0]


# ---- surface --------------------------------------------------------------------------------------------

def _docstring_parameters(function: Any) -> list[dict[str, Any]]:
    """The parameters pybind lists in a function's docstring, "name(a: T = d, ...) -> R"."""
    line = (function.__doc__ or "").strip().splitlines()[0]
    inner = line[line.index("(") + 1:line.rindex(") ->")]
    parts, depth, current = [], 0, ""
    for char in inner:
        depth += 1 if char in "[(<" else -1 if char in "])>" else 0
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    parameters = []
    for part in parts:
        name, _, rest = part.partition(":")
        default = rest.partition(" = ")[2] if " = " in rest else None
        parameters.append({"name": name, "type": rest.partition(" = ")[0].strip(), "default": default})
    if parameters and parameters[0]["name"] == "self" and parameters[0]["type"].startswith("c_python_backend_utils."):
        parameters = parameters[1:]   # bound: the instance
    return [{"name": p["name"], "keyword": not re.fullmatch(r"self|arg\d+", p["name"]),
             "positional": True, "default": _default(p["default"])} for p in parameters]


def _default(text: str | None) -> str | None:
    """A default as text, objects without a literal as "<object>"; None when there is none."""
    return None if text is None else "<object>" if " object at 0x" in text else text


def _parameters(owner: type | None, name: str, function: Any) -> list[dict[str, Any]]:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a pybind function: its signature is in its docstring
        return _docstring_parameters(function)
    parameters = list(signature.parameters.values())
    if owner is not None and not isinstance(inspect.getattr_static(owner, name), staticmethod):
        parameters = parameters[1:]   # self
    kinds = inspect.Parameter
    return [{"name": p.name, "keyword": p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY),
             "positional": p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD),
             "default": None if p.default is p.empty else _default(repr(p.default))}
            for p in parameters if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)] + \
        [{"name": "*" + p.name} for p in parameters if p.kind in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)]


def _describe_class(cls: type, constructor: bool) -> dict[str, Any]:
    """{"exception": its bases} or {"class": {attribute: its description}}."""
    if issubclass(cls, BaseException):
        return {"exception": [base.__name__ for base in cls.__mro__]}
    described: dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("_") and name not in ("__dlpack__", "__dlpack_device__"):
            continue
        value = getattr(cls, name)
        if isinstance(value, type):
            described[name] = {"enum": {member: int(item) for member, item in value.__members__.items()}}
        elif callable(value):
            described[name] = {"parameters": _parameters(cls, name, value)}
        else:
            described[name] = {"value": int(value), "type": type(value).__name__}
    if constructor:
        described["__init__"] = {"parameters": _parameters(cls, "__init__", cls.__init__)}
    return {"class": described}


def surface(pb_utils: Any, names: list[str]) -> dict[str, Any]:
    """`names` of pb_utils described, with the module's public names under "module"."""
    described: dict[str, Any] = {"module": sorted(n for n in dir(pb_utils) if not n.startswith("_"))}
    for name in names:
        value = getattr(pb_utils, name, None)
        if isinstance(value, type):   # the Logger is made by no one: its constructor is a refusal (behaviour)
            described[name] = _describe_class(value, constructor=name != "Logger")
        elif value is not None:
            described[name] = {"value": value}
    request = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
    family = pb_utils.MetricFamily(name="report_surface", description="d", kind=pb_utils.MetricFamily.GAUGE)
    for name, reached in zip(REACHED, (request.get_response_sender(), family.Metric(labels={}))):
        described[name] = _describe_class(type(reached), constructor=False)
    return described


# ---- behaviour ------------------------------------------------------------------------------------------

def _first_sentence(message: str) -> str:
    return message.split(". ")[0]


def plain(value: Any) -> Any:
    """`value` as JSON data: any other object as its type's name (an enum member too)."""
    if type(value) in (bool, int, float, str) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return f"<{type(value).__name__}>"


def attempt(call: Callable[[], Any], message: Callable[[str], str] = lambda m: m) -> dict[str, Any]:
    """{"ok": what `call` returned} or {"raises": the exception's type[, "message"]}."""
    try:
        return {"ok": plain(call())}
    except Exception as exc:  # noqa: BLE001 - how it refuses is the finding
        refused: dict[str, Any] = {"raises": type(exc).__name__}
        if not isinstance(exc, TypeError):   # pybind's wording of an argument refusal is its own
            refused["message"] = message(re.sub(r"for model '[^']*'", "for model '<instance>'", str(exc)))
        return refused


def summary(array: np.ndarray) -> dict[str, Any]:
    return {"dtype": str(array.dtype), "shape": list(array.shape), "values": repr(array.tolist()),
            "writeable": bool(array.flags.writeable)}


def _dlpack_header(capsule: Any) -> list[int]:
    from trtpool.triton.bfloat16 import _dl_tensor

    dl = _dl_tensor(capsule)
    return [dl.device_type, dl.dtype.code, dl.dtype.bits, dl.ndim]


def _tensor_behaviour(pb: Any) -> dict[str, Any]:
    from trtpool.triton import bfloat16

    T = pb.Tensor  # noqa: N806

    def aliasing() -> list[Any]:
        array = np.arange(4, dtype=np.float32)
        tensor = T("x", array)
        array[0] = 99
        return [float(tensor.as_numpy()[0]), bool(np.shares_memory(tensor.as_numpy(), array))]

    def dlpack_copies() -> float:
        array = np.arange(3, dtype=np.float32)
        tensor = T.from_dlpack("y", T("x", array).to_dlpack())
        array[0] = 7
        return float(tensor.as_numpy()[0])

    def made_bf16() -> Any:
        return bfloat16.to_triton(pb, "B", np.array([1.5, -2.0], ml_dtypes.bfloat16))

    floats = np.arange(4, dtype=np.float32)
    return {
        "basics": attempt(lambda: [T("x", floats).name(), T("x", floats).is_cpu(), T("x", floats).shape()]),
        "aliasing": attempt(aliasing),
        "bytes objects": attempt(lambda: summary(T("x", np.array([b"ab", b"c"], dtype=object)).as_numpy())),
        "str objects": attempt(lambda: summary(T("x", np.array(["ab", "\u00e9"], dtype=object)).as_numpy())),
        "bytes S": attempt(lambda: summary(T("x", np.array([b"ab", b"c"])).as_numpy())),
        "unicode U": attempt(lambda: T("x", np.array(["ab"]))),
        "complex": attempt(lambda: T("x", np.zeros(2, np.complex64))),
        "bfloat16 array": attempt(lambda: T("x", np.zeros(2, ml_dtypes.bfloat16))),
        "float16": attempt(lambda: summary(T("x", np.ones(2, np.float16)).as_numpy())),
        "bool": attempt(lambda: summary(T("x", np.array([True, False])).as_numpy())),
        "scalar": attempt(lambda: [T("x", np.array(2.5, np.float32)).shape(),
                                   summary(T("x", np.array(2.5, np.float32)).as_numpy())]),
        "not contiguous": attempt(lambda: summary(T("x", np.arange(6, dtype=np.int32).reshape(2, 3).T).as_numpy())),
        "a list": attempt(lambda: T("x", [1.0, 2.0])),
        "keywords": attempt(lambda: T(name="x", array=floats)),
        "int name": attempt(lambda: T(1, floats)),
        "empty name": attempt(lambda: T("", floats)),
        "dlpack round trip": attempt(lambda: summary(T.from_dlpack("y", T("x", floats).to_dlpack()).as_numpy())),
        "dlpack copies": attempt(dlpack_copies),
        "dlpack float16": attempt(lambda: summary(T.from_dlpack("y", T("x", np.ones(2, np.float16)).to_dlpack())
                                                  .as_numpy())),
        "dlpack bool": attempt(lambda: summary(T.from_dlpack("y", T("x", np.array([True, False])).to_dlpack())
                                               .as_numpy())),
        "dlpack scalar": attempt(lambda: summary(T.from_dlpack("y", T("x", np.array(3, np.int64)).to_dlpack())
                                                 .as_numpy())),
        "dlpack header": attempt(lambda: _dlpack_header(T("x", floats).to_dlpack())),
        "dlpack of bytes": attempt(lambda: T("s", np.array([b"a"], dtype=object)).to_dlpack()),
        "from_dlpack of a list": attempt(lambda: T.from_dlpack("x", [1, 2])),
        "from_dlpack int name": attempt(lambda: T.from_dlpack(1, T("x", floats).to_dlpack())),
        "dlpack device": attempt(lambda: list(T("x", floats).__dlpack_device__())),
        "numpy from a tensor": attempt(lambda: summary(np.from_dlpack(T("x", np.arange(2, dtype=np.int32))))),
        "bf16 as_numpy": attempt(lambda: made_bf16().as_numpy()),
        "bf16 shape": attempt(lambda: made_bf16().shape()),
        "bf16 header": attempt(lambda: _dlpack_header(made_bf16().to_dlpack())),
        "bf16 back": attempt(lambda: bfloat16.from_triton(made_bf16()).astype(np.float32).tolist()),
    }


def _error_behaviour(pb: Any) -> dict[str, Any]:
    E = pb.TritonError  # noqa: N806
    return {
        "codes": {name: int(getattr(E, name)) for name in dir(E) if name.isupper()},
        "a code equals its number": E.INVALID_ARG == 3 and hash(E.INVALID_ARG) == hash(3),
        "default code": attempt(lambda: [E("m").code() == E.INTERNAL, E("m").message()]),
        "keywords": attempt(lambda: int(E(message="m", code=E.CANCELLED).code())),
        "a number as code": attempt(lambda: E("m", 3)),
        "no message": attempt(lambda: E(None)),
        "is an exception": issubclass(E, BaseException),
        "str is not the message": attempt(lambda: str(E("m", E.UNAVAILABLE)) != "m"),
        "model exception": attempt(lambda: str(pb.TritonModelException("boom"))),
    }


def _response_behaviour(pb: Any) -> dict[str, Any]:
    R, E = pb.InferenceResponse, pb.TritonError  # noqa: N806
    tensor = pb.Tensor("x", np.zeros(2, np.float32))
    return {
        "empty": attempt(lambda: [R().has_error(), R().output_tensors(), R().error()]),
        "error": attempt(lambda: [R(error=E("m", E.UNAVAILABLE)).has_error(),
                                  int(R(error=E("m", E.UNAVAILABLE)).error().code()),
                                  R(error=E("m")).output_tensors()]),
        "both": attempt(lambda: [R([tensor], E("m")).has_error(),
                                 [t.name() for t in R([tensor], E("m")).output_tensors()]]),
        "same tensors": attempt(lambda: R([tensor]).output_tensors()[0] is tensor),
        "an array as output": attempt(lambda: R(output_tensors=[np.zeros(2)])),
        "a string as error": attempt(lambda: R(error="boom")),
        "an exception as error": attempt(lambda: R(error=ValueError("boom"))),
    }


def _request_behaviour(pb: Any) -> dict[str, Any]:
    def request(**parameters: Any) -> Any:
        return pb.InferenceRequest(model_name="m", inputs=[pb.Tensor("x", np.zeros(2, np.float32))],
                                   requested_output_names=["Y"], **parameters)

    return {
        "made": attempt(lambda: [request().parameters(), [t.name() for t in request().inputs()]]),
        "parameters": attempt(lambda: request(parameters={"trtpool_probe": True, "n": 2, "s": "v"}).parameters()),
        "parameters as text": attempt(lambda: request(parameters='{"a": 1}')),
        "a float parameter": attempt(lambda: request(parameters={"f": 1.5})),
        "no model name": attempt(lambda: pb.InferenceRequest(inputs=[], requested_output_names=[])),
        "an array as input": attempt(lambda: pb.InferenceRequest(model_name="m", inputs=[np.zeros(2)],
                                                                 requested_output_names=[])),
        "one sender": attempt(lambda: (lambda r: r.get_response_sender() is r.get_response_sender())(request())),
    }


def _metric_behaviour(pb: Any) -> dict[str, Any]:
    """Refusals that come from the server (a counter set or decremented, a label that is no string,
    a name taken by another kind, an invalid name) are not asked: the stub's answer to such a
    request races with the server, which then can abort (boost::interprocess::lock_exception,
    seen 2026-12-05 on the second of them). The double refuses them as a probe saw the stub do."""
    F = pb.MetricFamily  # noqa: N806
    counter = F(name="report_counter", description="d", kind=F.COUNTER)
    gauge = F(name="report_gauge", description="d", kind=F.GAUGE)
    series = counter.Metric(labels={"model": "p", "x": "1"})
    level = gauge.Metric(labels={"model": "p"})
    found = {
        "kinds": {name: int(getattr(F, name)) for name in ("COUNTER", "GAUGE")},
        "counter increment": attempt(lambda: [series.increment(2), series.value()]),
        "counter by a fraction": attempt(lambda: [series.increment(0.5), series.value()]),
        "same labels, same series": attempt(lambda: counter.Metric(labels={"x": "1", "model": "p"}).value()),
        "labels by position": attempt(lambda: counter.Metric({"x": "2"}).value()),
        "no labels": attempt(lambda: counter.Metric().value()),
        "labels as a list": attempt(lambda: counter.Metric(labels=["x"])),
        "buckets": attempt(lambda: counter.Metric(labels={"x": "3"}, buckets=[1.0])),
        "family deleted first": attempt(lambda: F(name="report_gone", description="d", kind=F.COUNTER)
                                        .Metric(labels={}).value()),
        "by position": attempt(lambda: type(F("report_positional", "d", F.GAUGE)).__name__),
        "gauge set": attempt(lambda: [level.set(3), level.value()]),
        "gauge down": attempt(lambda: [level.increment(-1), level.value()]),
        "gauge fraction": attempt(lambda: [level.set(0.25), level.value()]),
        "a number as kind": attempt(lambda: F(name="report_kind", description="d", kind=0)),
    }
    shared = F(name="report_shared", description="d", kind=F.COUNTER)
    twin = F(name="report_shared", description="d", kind=F.COUNTER)
    shared.Metric(labels={"a": "1"}).increment(3)
    found["two families of one name share series"] = attempt(lambda: twin.Metric(labels={"a": "1"}).value())
    del shared, twin
    gc.collect()
    renewed = F(name="report_shared", description="d", kind=F.COUNTER)
    found["gone with the last family"] = attempt(lambda: renewed.Metric(labels={"a": "1"}).value())
    return found


def _logger_behaviour(pb: Any) -> dict[str, Any]:
    L = pb.Logger  # noqa: N806
    return {
        "levels": {name: int(getattr(L, name)) for name in ("INFO", "WARNING", "ERROR", "VERBOSE")},
        "log": attempt(lambda: L.log("pb_utils report: a line at the default level")),
        "keywords": attempt(lambda: L.log(message="pb_utils report: a line by keywords", level=L.ERROR)),
        "a number as level": attempt(lambda: L.log("pb_utils report", 2)),
        "made": attempt(lambda: L()),
    }


def behaviour(pb_utils: Any) -> dict[str, Any]:
    return {"tensor": _tensor_behaviour(pb_utils), "error": _error_behaviour(pb_utils),
            "response": _response_behaviour(pb_utils), "request": _request_behaviour(pb_utils),
            "metric": _metric_behaviour(pb_utils), "logger": _logger_behaviour(pb_utils),
            "final flag": pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL}


# ---- a request as execute() receives it -------------------------------------------------------------------

def inbound(request: Any) -> dict[str, Any]:
    """The request's parameters and tensors: BYTES and FP32 read with as_numpy(), BF16 (which
    it refuses) read through DLPack."""
    from trtpool.triton import bfloat16

    tensors = {}
    for tensor in request.inputs():
        read = attempt(lambda: summary(tensor.as_numpy()))
        if read.get("raises"):
            read["by dlpack"] = bfloat16.from_triton(tensor).astype(np.float32).tolist()
        tensors[tensor.name()] = {"cpu": tensor.is_cpu(), "shape": tensor.shape(), "read": read}
    return {"parameters": json.loads(request.parameters()), "tensors": tensors}


def answer_twice(pb_utils: Any, request: Any) -> dict[str, Any]:
    """A response sender asked about cancellation, then answering twice with the final flag,
    then once more with no response. (The stub's second refusal in a model that is not
    decoupled says so in its second sentence: only the first is compared.)"""
    sender, final = request.get_response_sender(), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    return {
        "cancelled before": attempt(sender.is_cancelled),
        "first": attempt(lambda: sender.send(pb_utils.InferenceResponse(), flags=final)),
        "second": attempt(lambda: sender.send(pb_utils.InferenceResponse(), flags=final), _first_sentence),
        "no response": attempt(lambda: sender.send(flags=final), _first_sentence),
    }


def report(pb_utils: Any, names: list[str], request: Any, answered: dict[str, Any]) -> str:
    """Everything above as JSON: what the faithfulness test compares."""
    return json.dumps({"surface": surface(pb_utils, names), "behaviour": behaviour(pb_utils),
                       "inbound": inbound(request), "answered": answered}, sort_keys=True)
