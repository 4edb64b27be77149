"""A unary front (parameter `forward_to`) checked when it loads: it must forward to
a decoupled trtpool model, or no request it takes can ever be answered (one
forwarding to itself waited on itself until the client gave up).

What the stub can know at load: its own config, and its folder
(args["model_repository"] is <repository>/<model>), so the folders beside it
and their config.pbtxt. It cannot see other repositories given to
tritonserver (--model-repository more than once). Nor can it ask whether
the target has loaded: pb_utils.is_model_ready (the stub's one question about
another model, 24.10) is refused while the server starts ("Server not ready",
tests/ops/test_front_readiness_limit.py), and later it would race with the
target's own load, Triton loading a repository's models in parallel. Hence the rule: the target lies in the
same repository, and its config.pbtxt says backend "trtpool" and
model_transaction_policy { decoupled: true }.

The target's config.pbtxt is parsed with Triton's own schema, which tritonclient
ships (the 'builder' extra installs tritonclient[grpc]).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trtpool.errors import ConfigError
from trtpool.parameters import parameters_of

# Triton's own parameter, which a front may carry like any model.
FRONT_PARAMETERS = {"forward_to", "forward_timeout_seconds", "FORCE_CPU_ONLY_INPUT_TENSORS"}
# How long a front waits for its target's answer: above a busy target's queue and batch
# times, below tritonclient's default network timeout (60 s), so a client hears why.
DEFAULT_FORWARD_TIMEOUT_S = 30.0
MAX_FORWARD_TIMEOUT_S = 3600.0


def _declared_config(path: Path) -> Any:
    """The ModelConfig message a config.pbtxt declares."""
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:
        raise ConfigError(f"a front reads its target's config.pbtxt with tritonclient's ModelConfig schema, "
                          f"which this serving environment lacks ({exc}); install tritonclient[grpc] "
                          "(trtpool's 'builder' extra)") from exc
    try:
        return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    except (OSError, UnicodeDecodeError, text_format.ParseError) as exc:
        raise ConfigError(f"cannot read '{path}': {exc}") from exc


def check_front(model_config: dict[str, Any], model_folder: Path) -> str:
    """The front's target, once it is known to be a decoupled trtpool model beside
    this one; else ConfigError naming 'forward_to', the target and the reason."""
    params = parameters_of(model_config)
    target = params["forward_to"].strip()
    name = model_config.get("name", model_folder.name)
    where = f"parameter 'forward_to': '{target}'"
    other = sorted(set(params) - FRONT_PARAMETERS)
    if other:
        raise ConfigError(f"parameter(s) {other} do not apply to a front (forward_to), which only forwards; "
                          "remove them")
    if model_config.get("model_transaction_policy", {}).get("decoupled", False):
        raise ConfigError(f"a front (forward_to '{target}') answers unary clients, so it must not be decoupled; "
                          "set model_transaction_policy { decoupled: false }")
    if not target or "/" in target or target in (".", ".."):
        raise ConfigError(f"{where} is not a model name")
    if target == name:
        raise ConfigError(f"{where} is this model itself; a front forwards to another model, a decoupled "
                          "trtpool model, and forwarding to itself could never answer")
    repository = model_folder.parent
    config_path = repository / target / "config.pbtxt"
    if not config_path.is_file():
        raise ConfigError(f"{where}: no model '{target}' with a config.pbtxt in this model repository "
                          f"('{repository}'); the target must be a decoupled trtpool model in the front's "
                          "own repository")
    declared = _declared_config(config_path)
    if declared.backend != "trtpool":
        kind = f"backend '{declared.backend}'" if declared.backend else f"platform '{declared.platform}'"
        raise ConfigError(f"{where} is not a trtpool model ({kind} in '{config_path}'); a front forwards only "
                          "to a decoupled trtpool model")
    if not declared.model_transaction_policy.decoupled:
        raise ConfigError(f"{where} is not decoupled (model_transaction_policy.decoupled is false in "
                          f"'{config_path}'); unary clients can call it directly, and a front forwards only to "
                          "a decoupled trtpool model")
    if "forward_to" in declared.parameters:
        raise ConfigError(f"{where} is itself a front (forward_to "
                          f"'{declared.parameters['forward_to'].string_value}'); forward to the decoupled model")
    return target


def forward_timeout_s(model_config: dict[str, Any]) -> float:
    """The front's bound on each call to its target (parameter 'forward_timeout_seconds').

    A request lost inside a dead target stub is never answered, and Triton 2.51 offers no bound
    on it: BLS's InferenceRequest(timeout=) sets the request's queue timeout, which only the
    target's scheduler queue enforces (core r24.10 scheduler_utils.cc, and only with
    allow_timeout_override, only shortening a queue policy's nonzero default), never a request
    that a stub already holds."""
    text = parameters_of(model_config).get("forward_timeout_seconds", "").strip()
    if not text:
        return DEFAULT_FORWARD_TIMEOUT_S
    expected = f"expected seconds above 0, at most {MAX_FORWARD_TIMEOUT_S:.0f}"
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"parameter 'forward_timeout_seconds': '{text}' is not a number; {expected}") from None
    if not 0 < value <= MAX_FORWARD_TIMEOUT_S:
        raise ConfigError(f"parameter 'forward_timeout_seconds': {text} is out of range; {expected}")
    return value
