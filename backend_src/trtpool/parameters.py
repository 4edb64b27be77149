"""The model config's ``parameters`` read and validated into one frozen dataclass.

PARAMETERS is their one table: each key with how its text is read, its default, the values
it accepts and a line on what it does. It drives `load` (each value and each refusal, which
names the key and the accepted values), the unknown-key check, and the reference page
docs/reference/parameters.md, which scripts/parameters_page.py writes from it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtpool.errors import ConfigError
from trtpool.model.shapes import parse_profile
from trtpool.model.signature import ShapeRange
from trtpool.suggest import closest

RUNTIMES = ("auto", "tensorrt", "tensorrt_rtx", "onnxruntime", "torch")
# Runtimes beyond the built-in ones are registered by packages installed in the
# serving environment (the operator's choice), never named as code in a config.
RUNTIME_ENTRY_POINTS = "trtpool.runtimes"
_REGISTERED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MODES = ("sync", "pipelined", "decoupled")
PROCESS_FACES = ("auto", "request", "batch")  # trtpool.process.faces.choose_faces
PRECISIONS = ("fp32", "fp16")
# Ceilings: far above any useful value (contexts: auto takes at most 4), low enough that a
# typo cannot make a stub start 10,000 threads, wait hours to fill a batch or queue without end.
MAX_CONTEXTS = 64  # also response_threads and the process.py stages' threads
MAX_QUEUE_SIZE = 65_536
MAX_WAIT_US = 1_000_000  # batch_wait_microseconds, cancel_check_after_microseconds: 1 s
MAX_METRICS_INTERVAL_MS = 60_000
MAX_IDLE_S = 86_400.0  # shrink_after_idle_seconds: a day
MAX_SEQUENCE_BUCKET = 1_048_576
MAX_FILE_NAME, MAX_PATH = 255, 4096  # Linux's NAME_MAX and PATH_MAX
SWITCHES = ("on", "off")
ENGINE_HOST = ("auto", "on", "off")
PROCESS_FILE = "process.py"  # a version folder's process file (trtpool.process.file reads it)
AUTO_HOST_INSTANCES = 4  # instances on one GPU from which auto hands a tensor model to its engine host
# Unset, an engine host waits for nothing: Triton's dynamic batcher already waited for this
# batch, and the batches that queue while the host's workers are busy are merged anyway.
HOST_BATCH_WAIT_US = 0


def _refused(key: str, text: str, accepts: str) -> ConfigError:
    return ConfigError(f"parameter '{key}': '{text}' is not accepted; expected {accepts}")


@dataclass(frozen=True)
class Kind:
    """How a parameter's text is read: `accepts` says what it takes (in the docs and in the
    refusals); `read(key, text)` gives the value, or raises a ConfigError naming the key."""

    accepts: str
    read: Callable[[str, str], Any]


def whole(minimum: int, maximum: int) -> Kind:
    accepts = f"a whole number from {minimum} to {maximum}"

    def read(key: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"parameter '{key}': '{text}' is not an integer; expected {accepts}") from None
        if value < minimum:
            raise ConfigError(f"parameter '{key}': {value} is too small; expected {accepts}")
        if value > maximum:
            raise ConfigError(f"parameter '{key}': {value} is too large; expected {accepts}")
        return value

    return Kind(accepts, read)


def auto_or(number: Kind) -> Kind:
    """`auto` (read as None: decided when the model loads) or a number."""
    return Kind(f"auto, or {number.accepts}", lambda key, text: None if text == "auto" else number.read(key, text))


def choice(values: tuple[str, ...]) -> Kind:
    accepts = "one of " + ", ".join(values)

    def read(key: str, text: str) -> str:
        if text not in values:
            raise _refused(key, text, accepts)
        return text

    return Kind(accepts, read)


def positive(maximum: float, accepts: str) -> Kind:
    """A number above 0 and at most `maximum`."""

    def read(key: str, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 0 < value <= maximum:
            raise _refused(key, text, accepts)
        return value

    return Kind(accepts, read)


def sizes(maximum: int) -> Kind:
    """Sizes like 32,64,128, read sorted and without repeats."""

    def read(key: str, text: str) -> tuple[int, ...]:
        try:
            found = tuple(sorted({int(part) for part in text.split(",")}))
        except ValueError:
            raise _refused(key, text, "sizes like 32,64,128") from None
        if found[0] < 1 or found[-1] > maximum:
            raise ConfigError(f"parameter '{key}': every size in '{text}' must be from 1 to {maximum}")
        return found

    return Kind(f"sizes like 32,64,128, each from 1 to {maximum}", read)


def any_text(accepts: str) -> Kind:
    """Any text: a key trtpool takes but reads elsewhere (a front's target) or not at all (Triton's)."""
    return Kind(accepts, lambda key, value: value)


def _runtime(key: str, text: str) -> str:
    """A built-in runtime, or the name of one registered in the RUNTIME_ENTRY_POINTS group
    (looked up when the model loads: trtpool.runtimes.load_runtime)."""
    if text in RUNTIMES or _REGISTERED_NAME.fullmatch(text):
        return text
    raise ConfigError(
        f"parameter '{key}': '{text}' is not accepted; expected one of {', '.join(RUNTIMES)}, or the name "
        f"of a runtime that a package installed in the serving environment registers in the entry point "
        f"group '{RUNTIME_ENTRY_POINTS}' (a config names a runtime, never code such as module:Class)"
    )


def _file_name(key: str, text: str) -> str:
    """A file name the operating system can take: no NUL byte, no name past its limits."""
    if "\0" in text:
        raise ConfigError(
            f"parameter '{key}' contains a NUL byte; expected a file name inside the model's "
            "version folder, such as model.onnx"
        )
    longest = max((len(part.encode()) for part in text.split("/")), default=0)
    if longest > MAX_FILE_NAME or len(text.encode()) > MAX_PATH:
        raise ConfigError(
            f"parameter '{key}' is {len(text)} characters long; expected a file name inside "
            f"the model's version folder of at most {MAX_FILE_NAME} bytes per part and "
            f"{MAX_PATH} in all, such as model.onnx"
        )
    return text


def _profiles(key: str, text: str) -> tuple[dict[str, ShapeRange], ...]:
    """Shape ranges (trtpool.model.shapes), ';' between optimization profiles."""
    return tuple(parse_profile(part) for part in text.split(";") if part.strip())


@dataclass(frozen=True)
class Parameter:
    key: str
    kind: Kind
    default: str | None  # what an unset or empty value stands for; None: unset means none
    doc: str  # one line: what it does (docs/reference/parameters.md)


_COUNT = auto_or(whole(1, MAX_CONTEXTS))  # contexts and the process.py stages' threads
PARAMETERS = {
    p.key: p
    for p in (
        Parameter(
            "runtime",
            Kind(f"one of {', '.join(RUNTIMES)}, or a registered runtime's name", _runtime),
            "auto",
            "which runtime serves the model; auto picks by the file in the version folder",
        ),
        Parameter(
            "model_file",
            Kind("a file in the version folder", _file_name),
            "",
            "the model file; unset: the runtime's usual name (model.plan, model.onnx)",
        ),
        Parameter(
            "contexts",
            _COUNT,
            "auto",
            "a fixed pool of N contexts; auto: as many as fit in memory_fraction of free memory",
        ),
        Parameter(
            "min_contexts",
            whole(1, MAX_CONTEXTS),
            "1",
            "an elastic pool: the contexts kept when quiet (set it or max_contexts for an elastic pool)",
        ),
        Parameter(
            "max_contexts",
            whole(1, MAX_CONTEXTS),
            None,
            "an elastic pool: the most contexts; unset: what contexts auto sizes",
        ),
        Parameter(
            "grow_after_wait_microseconds",
            whole(0, MAX_WAIT_US),
            "500",
            "an elastic pool grows when a batch has waited this long with every context busy",
        ),
        Parameter(
            "shrink_after_idle_seconds",
            positive(MAX_IDLE_S, f"a number of seconds above 0 and at most {MAX_IDLE_S:g}"),
            "60",
            "an elastic pool closes a context that has not run for this long",
        ),
        Parameter(
            "memory_fraction",
            positive(1.0, "a number in (0, 1]"),
            "0.5",
            "the share of the device's free memory that contexts auto may use",
        ),
        Parameter(
            "mode",
            choice(MODES),
            "sync",
            "how batches run: one in flight (sync), several (pipelined), or gRPC streams (decoupled)",
        ),
        Parameter(
            "profile",
            Kind("shape ranges NAME=MIN:OPT:MAX, ',' between inputs, ';' between profiles", _profiles),
            "",
            "an ONNX file's shape ranges (an engine carries its own)",
        ),
        Parameter(
            "max_queue_size",
            whole(1, MAX_QUEUE_SIZE),
            "256",
            "decoupled mode, and a process.py's preprocessing: requests waiting beyond this are refused",
        ),
        Parameter(
            "batch_wait_microseconds",
            whole(0, MAX_WAIT_US),
            "500",
            f"decoupled mode: the wait to fill a batch; an engine host's wait for other instances' "
            f"batches (unset there: {HOST_BATCH_WAIT_US})",
        ),
        Parameter(
            "cancel_check_after_microseconds",
            whole(0, MAX_WAIT_US),
            "10000",
            "decoupled mode: requests queued this long are asked whether their client cancelled them",
        ),
        Parameter(
            "response_threads",
            whole(1, MAX_CONTEXTS),
            "1",
            "pipelined mode: the threads that send one batch's responses",
        ),
        Parameter(
            "forward_to",
            any_text("a decoupled trtpool model in the same repository"),
            None,
            "makes this model a unary front for that model",
        ),
        Parameter(
            "precision", choice(PRECISIONS), "fp32", "the torch runtime's compute precision; other runtimes ignore it"
        ),
        Parameter(
            "sequence_buckets",
            sizes(MAX_SEQUENCE_BUCKET),
            None,
            "the torch runtime pads dynamic non-batch dimensions up to these sizes",
        ),
        Parameter(
            "metrics_interval_ms",
            whole(0, MAX_METRICS_INTERVAL_MS),
            "1000",
            "how often trtpool's metrics reach Triton's; 0: after every batch",
        ),
        Parameter("cuda_graphs", choice(SWITCHES), "on", "the TensorRT runtime captures and replays CUDA graphs"),
        Parameter(
            "preprocess_threads",
            _COUNT,
            "auto",
            "a process.py's preprocess threads; auto: one per core (the batch face: one per context)",
        ),
        Parameter("postprocess_threads", _COUNT, "auto", "a process.py's postprocess threads; auto: one per core"),
        Parameter(
            "preprocess_processes",
            whole(0, MAX_CONTEXTS),
            "0",
            "a process.py's preprocess runs in N worker processes; 0: on the preprocess threads",
        ),
        Parameter(
            "process_faces",
            choice(PROCESS_FACES),
            "auto",
            "which of a process.py's faces serve: per request, per batch, or auto (batch on a GPU)",
        ),
        Parameter(
            "engine_host",
            choice(ENGINE_HOST),
            "auto",
            "on: one process per device owns the model and its contexts; auto: on for a sync model "
            f"without a process file with {AUTO_HOST_INSTANCES} or more instances on one GPU",
        ),
        Parameter(
            "FORCE_CPU_ONLY_INPUT_TENSORS",
            any_text("yes (Triton's default), no"),
            None,
            "Triton's Python-backend parameter, read by Triton: no leaves GPU inputs on the GPU",
        ),
    )
}
KNOWN_KEYS = frozenset(PARAMETERS)


def given(params: Mapping[str, str], key: str) -> bool:
    return bool(params.get(key, "").strip())


def value(params: Mapping[str, str], key: str) -> Any:
    """The parameter's value read by its kind; unset or empty: its default's (None where it has none)."""
    parameter = PARAMETERS[key]
    text = params.get(key, "").strip() or parameter.default
    return None if text is None else parameter.kind.read(key, text)


def default(key: str) -> Any:
    """The value an unset parameter has."""
    return value({}, key)


@dataclass(frozen=True)
class Elasticity:
    """An elastic pool's bounds and policy (trtpool.engine.pool.ContextPool)."""

    min_contexts: int = default("min_contexts")
    max_contexts: int | None = None  # None: contexts: auto's size (at least min_contexts)
    grow_after_wait_us: int = default("grow_after_wait_microseconds")  # every context busy this long: grow
    shrink_after_idle_s: float = default("shrink_after_idle_seconds")  # a context idle this long: close it


@dataclass(frozen=True)
class PoolConfig:
    """The parameters as read; every field is filled by `load` (defaults live in PARAMETERS)."""

    model_name: str
    version_dir: Path
    runtime: str
    model_file: str
    contexts: int | None  # None: derive from memory ("auto")
    memory_fraction: float
    mode: str
    profiles: tuple[dict[str, ShapeRange], ...]
    max_queue_size: int
    batch_wait_us: int
    host_batch_wait_us: int  # the engine host's wait for other instances' batches (trtpool.host.engine)
    cancel_check_after_us: int
    max_batch_size: int
    device: str  # "cpu" or "cuda:N"
    precision: str  # the torch runtime's compute precision
    metrics_interval_ms: int  # how often trtpool's metrics reach Triton; 0: after every batch
    sequence_buckets: tuple[int, ...] | None  # the torch runtime's padding of dynamic dims
    response_threads: int  # pipelined mode: threads that send one batch's responses at once
    cuda_graphs: bool  # the TensorRT runtime captures and replays CUDA graphs
    elastic: Elasticity | None  # None: a fixed pool of `contexts`
    preprocess_threads: int | None  # process.py's preprocess workers; None (auto): see instance.py
    postprocess_threads: int  # process.py's postprocess workers (auto: stage_threads)
    preprocess_processes: int  # worker processes running preprocess (0: on the pre threads)
    process_faces: str  # which of process.py's faces serve (trtpool.process.faces.choose_faces)
    engine_host: str  # on | off, auto settled by load (engine_host_on)

    @property
    def most_contexts(self) -> int | None:
        """The most contexts that may run at once, where the config fixes it (None: auto)."""
        return self.elastic.max_contexts if self.elastic else self.contexts


def instance_device(kind: str, device_id: str) -> str:
    """Where a Triton model instance runs: "cuda:N" for KIND_GPU on GPU N, else "cpu".

    With instance_group [{ kind: KIND_GPU, gpus: [0, 1] }] Triton makes one
    instance per listed GPU and passes its id; each instance then loads its
    own engine and context pool on that device only.
    """
    return f"cuda:{int(device_id)}" if kind == "GPU" else "cpu"


def parameters_of(model_config: dict[str, Any]) -> dict[str, str]:
    """Triton's {"key": {"string_value": v}} parameters as a plain dict."""
    return {k: v.get("string_value", "") for k, v in model_config.get("parameters", {}).items()}


def stage_threads() -> int:
    """process.py's workers per stage when the config says auto: one per core, since Pillow's
    decode and resize release the GIL (bench/results/decode_choice.json), within the ceiling an
    explicit count has."""
    return max(1, min(MAX_CONTEXTS, len(os.sched_getaffinity(0))))


def _elasticity(params: dict[str, str], contexts: int | None) -> Elasticity | None:
    """The elastic pool's parameters, or None (a fixed pool) when neither bound is given."""
    bounds = [key for key in ("min_contexts", "max_contexts") if given(params, key)]
    policy = [key for key in ("grow_after_wait_microseconds", "shrink_after_idle_seconds") if given(params, key)]
    if not bounds:
        if policy:
            raise ConfigError(
                f"parameter '{policy[0]}' applies to an elastic pool; set min_contexts and/or "
                "max_contexts too, or remove it"
            )
        return None
    if contexts is not None:
        raise ConfigError(
            f"parameter 'contexts' is {contexts} but '{bounds[0]}' is set too: a fixed pool takes "
            "contexts: N alone; an elastic one min_contexts and max_contexts (or contexts: auto "
            "as its maximum)"
        )
    minimum, maximum = value(params, "min_contexts"), value(params, "max_contexts")
    if maximum is not None and maximum < minimum:
        raise ConfigError(
            f"parameter 'max_contexts': {maximum} is below min_contexts {minimum}; expected a whole number >= {minimum}"
        )
    return Elasticity(
        minimum, maximum, value(params, "grow_after_wait_microseconds"), value(params, "shrink_after_idle_seconds")
    )


def _did_you_mean(unknown: list[str]) -> str:
    """' (did you mean 'contexts'?)' for the unknown keys that misspell a known one."""
    hints = [(key, match) for key in unknown if (match := closest(key, KNOWN_KEYS))]
    if not hints:
        return ""
    if len(unknown) == 1:
        return f" (did you mean '{hints[0][1]}'?)"
    return " (did you mean " + ", ".join(f"'{match}' for '{key}'" for key, match in hints) + "?)"


def load(model_config: dict[str, Any], version_dir: Path, device: str) -> PoolConfig:
    """Validate the parameters; every error names the parameter and the accepted values."""
    params = parameters_of(model_config)
    unknown = sorted(set(params) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown parameter(s) {unknown}{_did_you_mean(unknown)}; trtpool accepts {sorted(KNOWN_KEYS)}"
        )

    contexts = value(params, "contexts")
    memory_fraction = value(params, "memory_fraction")
    mode = value(params, "mode")
    decoupled = model_config.get("model_transaction_policy", {}).get("decoupled", False)
    if (mode == "decoupled") != bool(decoupled):
        raise ConfigError(
            f"parameter 'mode' is '{mode}' but model_transaction_policy.decoupled is "
            f"{str(bool(decoupled)).lower()}; set decoupled: {str(mode == 'decoupled').lower()}"
        )
    profiles = value(params, "profile")

    return PoolConfig(
        model_name=model_config.get("name", ""),
        version_dir=version_dir,
        runtime=value(params, "runtime"),
        model_file=value(params, "model_file"),
        contexts=contexts,
        memory_fraction=memory_fraction,
        mode=mode,
        profiles=profiles,
        max_queue_size=value(params, "max_queue_size"),
        batch_wait_us=value(params, "batch_wait_microseconds"),
        host_batch_wait_us=(
            value(params, "batch_wait_microseconds") if given(params, "batch_wait_microseconds") else HOST_BATCH_WAIT_US
        ),
        cancel_check_after_us=value(params, "cancel_check_after_microseconds"),
        max_batch_size=int(model_config.get("max_batch_size", 0)),
        device=device,
        precision=value(params, "precision"),
        metrics_interval_ms=value(params, "metrics_interval_ms"),
        sequence_buckets=value(params, "sequence_buckets"),
        response_threads=value(params, "response_threads"),
        cuda_graphs=value(params, "cuda_graphs") == "on",
        elastic=_elasticity(params, contexts),
        preprocess_threads=value(params, "preprocess_threads"),
        # auto is one per core here, where preprocess's auto waits for the instance (it depends on the face).
        postprocess_threads=value(params, "postprocess_threads") or stage_threads(),
        preprocess_processes=value(params, "preprocess_processes"),
        process_faces=value(params, "process_faces"),
        engine_host=_engine_host(
            value(params, "engine_host"),
            mode,
            device,
            instances_on(model_config, device),
            (version_dir / PROCESS_FILE).exists(),
        ),
    )


def instances_on(model_config: Mapping[str, Any], device: str) -> int:
    """How many instances of the model Triton puts on `device`'s GPU (0 for "cpu"): every GPU group
    (KIND_AUTO is one on a GPU machine) that lists the GPU, or lists none and so covers every GPU."""
    if device == "cpu":
        return 0
    gpu = int(device.split(":")[1])
    return sum(
        int(group.get("count", 1))
        for group in model_config.get("instance_group", [])
        if group.get("kind", "KIND_AUTO") in ("KIND_GPU", "KIND_AUTO")
        and (not group.get("gpus") or gpu in [int(g) for g in group["gpus"]])
    )


def _engine_host(setting: str, mode: str, device: str, instances: int, process_file: bool) -> str:
    """on or off, auto decided (engine_host_on says by what)."""
    if setting == "on" and mode != "sync":
        raise ConfigError(
            f"parameter 'engine_host' is 'on' but mode is '{mode}': instances that forward to an "
            "engine host are sync instances (the host overlaps every instance's batches on its "
            "contexts); set mode sync, or engine_host off"
        )
    if setting != "auto":
        return setting
    tensor_model = not process_file  # a process file's GPU decode lost to ordinary instances (0.87-0.89x)
    many = instances >= AUTO_HOST_INSTANCES and device != "cpu"
    return "on" if mode == "sync" and tensor_model and many else "off"


def engine_host_on(cfg: PoolConfig) -> bool:
    """Whether this instance forwards to its model's engine host (trtpool.host); `load` settles auto.

    auto is on for a sync model without a process file that has AUTO_HOST_INSTANCES or more instances on
    one GPU, off otherwise. Measured on one H200 (bench/results/h200/engine_host.json, 2026-12-06): six
    thin instances and their host against the best ordinary arrangement (two sync instances; four served
    2,300 against two's 3,862 on 2026-12-03, bench/journal/tensor-ceiling.md), batch-1 clients at 64-512:
    ResNet-50 over plain gRPC 1.51-1.85x, BERT-base over gRPC 1.17-2.16x and over CUDA shm 1.11-1.25x,
    ResNet-50 over CUDA shm 0.73x at 64 clients, 0.92x at 128, 1.31x at 256; one copy of the weights
    instead of one per instance. A process file's JPEG decode in the host served 0.87-0.89x of six
    ordinary instances, and on the CPU the host served 0.75x (bench/results/engine_host_cpu.json): auto
    keeps it off for both."""
    return cfg.engine_host == "on"
