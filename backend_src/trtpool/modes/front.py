"""A unary front (parameter ``forward_to``): a decoupled trtpool model made callable by HTTP /infer
and unary gRPC. check_front refuses at load a target that is not a decoupled trtpool model in the
same repository; ForwardHandler forwards each request with BLS, each within
``forward_timeout_seconds``, and returns its single response. Why the rule and the bound:
docs/design/front.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

from trtpool.errors import ConfigError
from trtpool.parameters import parameters_of
from trtpool.triton.pb_api import BlsPbUtils, BlsRequest, InferenceRequest, InferenceResponse, TritonError
from trtpool.triton.probes import PROBE_MARK, is_probe

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
        raise ConfigError(
            f"a front reads its target's config.pbtxt with tritonclient's ModelConfig schema, "
            f"which this serving environment lacks ({exc}); install tritonclient[grpc] "
            "(trtpool's 'builder' extra)"
        ) from exc
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
        raise ConfigError(
            f"parameter(s) {other} do not apply to a front (forward_to), which only forwards; remove them"
        )
    if model_config.get("model_transaction_policy", {}).get("decoupled", False):
        raise ConfigError(
            f"a front (forward_to '{target}') answers unary clients, so it must not be decoupled; "
            "set model_transaction_policy { decoupled: false }"
        )
    if not target or "/" in target or target in (".", ".."):
        raise ConfigError(f"{where} is not a model name")
    if target == name:
        raise ConfigError(
            f"{where} is this model itself; a front forwards to another model, a decoupled "
            "trtpool model, and forwarding to itself could never answer"
        )
    repository = model_folder.parent
    config_path = repository / target / "config.pbtxt"
    if not config_path.is_file():
        raise ConfigError(
            f"{where}: no model '{target}' with a config.pbtxt in this model repository "
            f"('{repository}'); the target must be a decoupled trtpool model in the front's "
            "own repository"
        )
    declared = _declared_config(config_path)
    if declared.backend != "trtpool":
        kind = f"backend '{declared.backend}'" if declared.backend else f"platform '{declared.platform}'"
        raise ConfigError(
            f"{where} is not a trtpool model ({kind} in '{config_path}'); a front forwards only "
            "to a decoupled trtpool model"
        )
    if not declared.model_transaction_policy.decoupled:
        raise ConfigError(
            f"{where} is not decoupled (model_transaction_policy.decoupled is false in "
            f"'{config_path}'); unary clients can call it directly, and a front forwards only to "
            "a decoupled trtpool model"
        )
    if "forward_to" in declared.parameters:
        raise ConfigError(
            f"{where} is itself a front (forward_to "
            f"'{declared.parameters['forward_to'].string_value}'); forward to the decoupled model"
        )
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


class ForwardHandler:
    """Forwards unary requests to a decoupled trtpool model, all at once, each within
    `timeout_s` (trtpool.modes.front.forward_timeout_s says why the front bounds them itself)."""

    def __init__(self, pb_utils: BlsPbUtils, target: str, output_names: list[str], timeout_s: float) -> None:
        self.pb = pb_utils
        self.target = target
        self.output_names = output_names
        self.timeout_s = timeout_s
        self.held = 0  # calls given up on and not yet returned: each holds a BLS thread of the Python backend

    async def _forward(self, request: InferenceRequest) -> InferenceResponse:
        probe = is_probe(request)
        forwarded = self.pb.InferenceRequest(
            model_name=self.target,
            inputs=request.inputs(),
            requested_output_names=self.output_names,
            parameters=PROBE_MARK if probe else {},  # a probe stays one (trtpool.triton.probes)
        )
        call = self._exchange(forwarded)
        try:
            replies = await asyncio.wait_for(asyncio.shield(call), self.timeout_s)
        except asyncio.TimeoutError:
            return self._gave_up(call)
        except self.pb.TritonModelException as exc:
            return self._failed(self.pb.TritonError(str(exc)))
        answer = None
        # trtpool's decoupled models send one final response per request.
        for reply in replies:
            error = reply.error()
            if error is not None:
                return self._failed(error)
            if reply.output_tensors():
                answer = self.pb.InferenceResponse(output_tensors=reply.output_tensors())
        if answer is None and probe:  # a target with a process file answers a probe with no outputs
            return self.pb.InferenceResponse(output_tensors=[])
        # No output and no error: the target went away with the request (an unload).
        return answer or self._unavailable("sent no output (it was unloading or stopped)")

    @staticmethod
    def _exchange(forwarded: BlsRequest) -> asyncio.Future[list[InferenceResponse]]:
        """Every reply to `forwarded`, from a daemon thread of its own. Not async_exec, which
        runs the call on the event loop's default executor: a call lost inside a dead target
        stub never returns, and a few of them (the executor has min(32, cores + 4) threads)
        would leave no thread for any later call, and Python joins an executor's threads when
        the stub's interpreter exits. Reading the replies blocks as well, so it happens on that
        thread too."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[InferenceResponse]] = loop.create_future()

        def settle(replies: list[InferenceResponse] | None, error: BaseException | None) -> None:
            if future.cancelled():  # the stub's loop is shutting down
                return
            if error is not None:
                future.set_exception(error)
            else:
                assert replies is not None  # run() hands over the replies or the error
                future.set_result(replies)

        def run() -> None:
            try:
                replies, error = list(forwarded.exec(decoupled=True)), None
            except Exception as exc:  # noqa: BLE001 - TritonModelException: the call's own error, for the front to answer
                replies, error = None, exc
            with contextlib.suppress(RuntimeError):  # the stub's loop closed meanwhile (it is finalizing): nobody waits
                loop.call_soon_threadsafe(settle, replies, error)

        threading.Thread(target=run, name="trtpool-forward", daemon=True).start()
        return future

    def _gave_up(self, call: asyncio.Future[list[InferenceResponse]]) -> InferenceResponse:
        """UNAVAILABLE, saying why. The call goes on: Triton 2.51 cannot cancel a BLS call, and
        one lost inside a dead stub holds a thread of the Python backend's BLS pool for good (its
        thread-pool-size, default 32); once every thread is held, no call reaches the target."""
        self.held += 1
        call.add_done_callback(self._returned)
        return self._unavailable(
            f"sent no answer within {self.timeout_s:g} s (this front's forward_timeout_seconds): its stub may have "
            "died (docs/operations.md, 'Recovering from a dead stub') or it is overloaded; retry once it serves "
            f"again ({self.held} call(s) given up on hold BLS threads of the Python backend, 32 by default: "
            "once all are held, restart the server)"
        )

    def _returned(self, call: asyncio.Future[list[InferenceResponse]]) -> None:
        """A call given up on came back after all (a slow target): its thread is free again."""
        self.held -= 1
        if not call.cancelled():
            call.exception()  # read: nobody else will, and asyncio would log it as never retrieved

    def _failed(self, error: TritonError) -> InferenceResponse:
        """The target's error, or UNAVAILABLE naming the target when it is not loaded or not ready
        (the Python backend's BLS says so as an INTERNAL error, and Triton would answer 500)."""
        if f"Model '{self.target}' is not ready" in error.message():
            return self._unavailable("is not ready (not loaded, failed to load, or loading); retry later")
        return self.pb.InferenceResponse(error=error)

    def _unavailable(self, what: str) -> InferenceResponse:
        return self.pb.InferenceResponse(
            error=self.pb.TritonError(
                f"model '{self.target}' (this front's forward_to target) {what}", self.pb.TritonError.UNAVAILABLE
            )
        )

    async def __call__(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        return list(await asyncio.gather(*(self._forward(r) for r in requests)))

    def close(self) -> None:
        pass
