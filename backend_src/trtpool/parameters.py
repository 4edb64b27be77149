"""The model config's ``parameters`` read and validated into one frozen dataclass.

    parameters [
      { key: "runtime"         value: { string_value: "auto" } },   # auto | tensorrt | tensorrt_rtx | onnxruntime | torch | a registered name
      { key: "model_file"      value: { string_value: "" } },       # in the version folder; default: the runtime's usual name
      { key: "contexts"        value: { string_value: "auto" } },   # N (1 to 64, what fits in memory), or auto: sized from free memory
      { key: "min_contexts"    value: { string_value: "1" } },      # elastic pool: contexts kept at the quietest
      { key: "max_contexts"    value: { string_value: "4" } },      # elastic pool: at most (default: auto's size)
      { key: "grow_after_wait_microseconds" value: { string_value: "500" } },   # elastic: see engine/pool.py
      { key: "shrink_after_idle_seconds" value: { string_value: "60" } },       # elastic: see engine/pool.py
      { key: "memory_fraction" value: { string_value: "0.5" } },    # share of free memory contexts: auto may use
      { key: "mode"            value: { string_value: "sync" } },   # sync | pipelined | decoupled
      { key: "profile"         value: { string_value: "..." } },    # shape ranges (trtpool.model.shapes); ';' between profiles
      { key: "max_queue_size"  value: { string_value: "256" } },    # decoupled: requests waiting beyond this are refused
      { key: "batch_wait_microseconds" value: { string_value: "500" } }, # decoupled: wait to fill a batch (500);
                                                                   # engine host: wait for other instances' (0)
      { key: "cancel_check_after_microseconds" value: { string_value: "10000" } }, # decoupled: see modes/decoupled.py
      { key: "response_threads" value: { string_value: "1" } },     # pipelined: threads sending one batch's responses
      { key: "forward_to"      value: { string_value: "bert_base" } }, # a unary front for a decoupled model
      { key: "precision"       value: { string_value: "fp32" } },      # torch runtime: fp32 | fp16
      { key: "sequence_buckets" value: { string_value: "" } },         # torch runtime: pad dynamic dims, e.g. 32,64,128
      { key: "metrics_interval_ms" value: { string_value: "1000" } },  # trtpool's metrics to Triton; 0: every batch
      { key: "cuda_graphs"     value: { string_value: "on" } },        # TensorRT runtime: on | off
      { key: "preprocess_threads"  value: { string_value: "auto" } },  # process.py: threads running preprocess
      { key: "postprocess_threads" value: { string_value: "auto" } },  # process.py: threads running postprocess
      { key: "preprocess_processes" value: { string_value: "0" } },    # process.py: worker processes for preprocess
      { key: "process_faces"   value: { string_value: "auto" } },      # process.py: auto | request | batch (process/faces.py)
      { key: "engine_host"     value: { string_value: "auto" } },      # auto | on | off: one process owns the model (trtpool.host)
      { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }  # Triton's: GPU inputs stay on the GPU
    ]
"""
from __future__ import annotations

import os
import re
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
KNOWN_KEYS = {
    "runtime", "model_file", "contexts", "memory_fraction", "mode", "profile",
    "max_queue_size", "batch_wait_microseconds", "cancel_check_after_microseconds", "forward_to", "precision",
    "metrics_interval_ms", "sequence_buckets", "response_threads", "cuda_graphs",
    "FORCE_CPU_ONLY_INPUT_TENSORS", "min_contexts", "max_contexts", "grow_after_wait_microseconds",
    "shrink_after_idle_seconds", "preprocess_threads", "postprocess_threads", "preprocess_processes",
    "process_faces", "engine_host",
}
PROCESS_FACES = ("auto", "request", "batch")  # trtpool.process.faces.choose_faces
PRECISIONS = ("fp32", "fp16")
# Ceilings: far above any useful value (contexts: auto takes at most 4), low enough that a
# typo cannot make a stub start 10,000 threads, wait hours to fill a batch or queue without end.
MAX_CONTEXTS = 64                   # also response_threads and the process.py stages' threads
MAX_QUEUE_SIZE = 65_536
MAX_WAIT_US = 1_000_000             # batch_wait_microseconds, cancel_check_after_microseconds: 1 s
MAX_METRICS_INTERVAL_MS = 60_000
MAX_IDLE_S = 86_400.0               # shrink_after_idle_seconds: a day
MAX_SEQUENCE_BUCKET = 1_048_576
MAX_FILE_NAME, MAX_PATH = 255, 4096  # Linux's NAME_MAX and PATH_MAX
SWITCHES = ("on", "off")
ENGINE_HOST = ("auto", "on", "off")


@dataclass(frozen=True)
class Elasticity:
    """An elastic pool's bounds and policy (trtpool.engine.pool.ContextPool)."""

    min_contexts: int = 1
    max_contexts: int | None = None  # None: contexts: auto's size (at least min_contexts)
    grow_after_wait_us: int = 500    # grow when a batch has waited this long with every context busy
    shrink_after_idle_s: float = 60.0  # close a context that has not run for this long


@dataclass(frozen=True)
class PoolConfig:
    model_name: str
    version_dir: Path
    runtime: str
    model_file: str
    contexts: int | None          # None: derive from memory ("auto")
    memory_fraction: float
    mode: str
    profiles: tuple[dict[str, ShapeRange], ...]
    max_queue_size: int
    batch_wait_us: int
    host_batch_wait_us: int       # the engine host's wait for other instances' batches (trtpool.host.engine)
    cancel_check_after_us: int
    max_batch_size: int
    device: str                   # "cpu" or "cuda:N"
    precision: str = "fp32"       # the torch runtime's compute precision
    metrics_interval_ms: int = 1000  # how often trtpool's metrics reach Triton; 0: after every batch
    sequence_buckets: tuple[int, ...] | None = None  # the torch runtime's padding of dynamic dims
    response_threads: int = 1     # pipelined mode: threads that send one batch's responses at once
    cuda_graphs: bool = True      # the TensorRT runtime captures and replays CUDA graphs
    elastic: Elasticity | None = None  # None: a fixed pool of `contexts`
    preprocess_threads: int | None = None  # process.py's preprocess workers; None (auto): see instance.py
    postprocess_threads: int = 1  # process.py's postprocess workers (auto: stage_threads)
    preprocess_processes: int = 0  # worker processes running preprocess (0: on the pre threads)
    process_faces: str = "auto"   # which of process.py's faces serve (trtpool.process.faces.choose_faces)
    engine_host: str = "auto"     # auto | on | off (engine_host_on)

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


def _whole_number(params: dict[str, str], key: str, default: int, maximum: int, minimum: int = 1) -> int:
    text = params.get(key, "").strip() or str(default)
    accepted = f"a whole number from {minimum} to {maximum}"
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"parameter '{key}': '{text}' is not an integer; expected {accepted}") from None
    if value < minimum:
        raise ConfigError(f"parameter '{key}': {value} is too small; expected {accepted}")
    if value > maximum:
        raise ConfigError(f"parameter '{key}': {value} is too large; expected {accepted}")
    return value


def stage_threads() -> int:
    """process.py's workers per stage when the config says auto: one per core, since Pillow's
    decode and resize release the GIL (bench/results/decode_choice.json), within the ceiling an
    explicit count has."""
    return max(1, min(MAX_CONTEXTS, len(os.sched_getaffinity(0))))


def _is_auto(params: dict[str, str], key: str) -> bool:
    return params.get(key, "").strip() in ("", "auto")


def _threads(params: dict[str, str], key: str) -> int:
    if _is_auto(params, key):
        return stage_threads()
    return _whole_number(params, key, 1, MAX_CONTEXTS)


def _choice(params: dict[str, str], key: str, accepted: tuple[str, ...], default: str) -> str:
    value = params.get(key, "").strip() or default
    if value not in accepted:
        raise ConfigError(f"parameter '{key}': '{value}' is not accepted; expected one of {', '.join(accepted)}")
    return value


def _runtime(params: dict[str, str]) -> str:
    """A built-in runtime, or the name of one registered in the RUNTIME_ENTRY_POINTS
    group (looked up when the model loads: trtpool.runtimes.load_runtime)."""
    value = params.get("runtime", "").strip() or "auto"
    if value in RUNTIMES or _REGISTERED_NAME.fullmatch(value):
        return value
    raise ConfigError(
        f"parameter 'runtime': '{value}' is not accepted; expected one of {', '.join(RUNTIMES)}, or the name "
        f"of a runtime that a package installed in the serving environment registers in the entry point "
        f"group '{RUNTIME_ENTRY_POINTS}' (a config names a runtime, never code such as module:Class)"
    )


def _model_file(params: dict[str, str]) -> str:
    """A file name the operating system can take: no NUL byte, no name past its limits."""
    text = params.get("model_file", "").strip()
    if "\0" in text:
        raise ConfigError("parameter 'model_file' contains a NUL byte; expected a file name inside the model's "
                          "version folder, such as model.onnx")
    longest = max((len(part.encode()) for part in text.split("/")), default=0)
    if longest > MAX_FILE_NAME or len(text.encode()) > MAX_PATH:
        raise ConfigError(f"parameter 'model_file' is {len(text)} characters long; expected a file name inside "
                          f"the model's version folder of at most {MAX_FILE_NAME} bytes per part and "
                          f"{MAX_PATH} in all, such as model.onnx")
    return text


def _sizes(params: dict[str, str], key: str) -> tuple[int, ...] | None:
    text = params.get(key, "").strip()
    if not text:
        return None
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise ConfigError(f"parameter '{key}': '{text}' is not accepted; expected sizes like 32,64,128") from None
    if sizes[0] < 1 or sizes[-1] > MAX_SEQUENCE_BUCKET:
        raise ConfigError(f"parameter '{key}': every size in '{text}' must be from 1 to {MAX_SEQUENCE_BUCKET}")
    return sizes


def _seconds(params: dict[str, str], key: str, default: float, maximum: float) -> float:
    text = params.get(key, "").strip() or str(default)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= maximum:
        raise ConfigError(f"parameter '{key}': '{text}' is not accepted; expected a number of seconds "
                          f"above 0 and at most {maximum:g}")
    return value


def _elasticity(params: dict[str, str], contexts: int | None) -> Elasticity | None:
    """The elastic pool's parameters, or None (a fixed pool) when neither bound is given."""
    bounds = [key for key in ("min_contexts", "max_contexts") if params.get(key, "").strip()]
    policy = [key for key in ("grow_after_wait_microseconds", "shrink_after_idle_seconds")
              if params.get(key, "").strip()]
    if not bounds:
        if policy:
            raise ConfigError(f"parameter '{policy[0]}' applies to an elastic pool; set min_contexts and/or "
                              "max_contexts too, or remove it")
        return None
    if contexts is not None:
        raise ConfigError(f"parameter 'contexts' is {contexts} but '{bounds[0]}' is set too: a fixed pool takes "
                          "contexts: N alone; an elastic one min_contexts and max_contexts (or contexts: auto "
                          "as its maximum)")
    minimum = _whole_number(params, "min_contexts", 1, MAX_CONTEXTS)
    maximum = (_whole_number(params, "max_contexts", 1, MAX_CONTEXTS)
               if params.get("max_contexts", "").strip() else None)
    if maximum is not None and maximum < minimum:
        raise ConfigError(f"parameter 'max_contexts': {maximum} is below min_contexts {minimum}; expected a "
                          f"whole number >= {minimum}")
    return Elasticity(minimum, maximum,
                      _whole_number(params, "grow_after_wait_microseconds", Elasticity.grow_after_wait_us,
                                    MAX_WAIT_US, minimum=0),
                      _seconds(params, "shrink_after_idle_seconds", Elasticity.shrink_after_idle_s, MAX_IDLE_S))


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
        raise ConfigError(f"unknown parameter(s) {unknown}{_did_you_mean(unknown)}; trtpool accepts "
                          f"{sorted(KNOWN_KEYS)}")

    contexts_text = params.get("contexts", "").strip() or "auto"
    contexts = None if contexts_text == "auto" else _whole_number(params, "contexts", 1, MAX_CONTEXTS)

    fraction_text = params.get("memory_fraction", "").strip() or "0.5"
    try:
        memory_fraction = float(fraction_text)
    except ValueError:
        memory_fraction = -1.0
    if not 0.0 < memory_fraction <= 1.0:
        raise ConfigError(f"parameter 'memory_fraction': '{fraction_text}' is not accepted; expected a number in (0, 1]")

    mode = _choice(params, "mode", MODES, "sync")
    decoupled = model_config.get("model_transaction_policy", {}).get("decoupled", False)
    if (mode == "decoupled") != bool(decoupled):
        raise ConfigError(
            f"parameter 'mode' is '{mode}' but model_transaction_policy.decoupled is "
            f"{str(bool(decoupled)).lower()}; set decoupled: {str(mode == 'decoupled').lower()}"
        )

    profile_text = params.get("profile", "").strip()
    profiles = tuple(parse_profile(p) for p in profile_text.split(";") if p.strip())

    return PoolConfig(
        model_name=model_config.get("name", ""),
        version_dir=version_dir,
        runtime=_runtime(params),
        model_file=_model_file(params),
        contexts=contexts,
        memory_fraction=memory_fraction,
        mode=mode,
        profiles=profiles,
        max_queue_size=_whole_number(params, "max_queue_size", 256, MAX_QUEUE_SIZE),
        batch_wait_us=_whole_number(params, "batch_wait_microseconds", 500, MAX_WAIT_US, minimum=0),
        # Unset, an engine host waits for nothing: Triton's dynamic batcher already waited for this
        # batch, and the batches that queue while the host's workers are busy are merged anyway.
        host_batch_wait_us=_whole_number(params, "batch_wait_microseconds", 0, MAX_WAIT_US, minimum=0),
        cancel_check_after_us=_whole_number(params, "cancel_check_after_microseconds", 10_000, minimum=0,
                                            maximum=MAX_WAIT_US),
        max_batch_size=int(model_config.get("max_batch_size", 0)),
        device=device,
        precision=_choice(params, "precision", PRECISIONS, "fp32"),
        metrics_interval_ms=_whole_number(params, "metrics_interval_ms", 1000, minimum=0,
                                           maximum=MAX_METRICS_INTERVAL_MS),
        sequence_buckets=_sizes(params, "sequence_buckets"),
        response_threads=_whole_number(params, "response_threads", 1, MAX_CONTEXTS),
        cuda_graphs=_choice(params, "cuda_graphs", SWITCHES, "on") == "on",
        elastic=_elasticity(params, contexts),
        preprocess_threads=None if _is_auto(params, "preprocess_threads") else _threads(params, "preprocess_threads"),
        postprocess_threads=_threads(params, "postprocess_threads"),
        preprocess_processes=_whole_number(params, "preprocess_processes", 0, MAX_CONTEXTS, minimum=0),
        process_faces=_choice(params, "process_faces", PROCESS_FACES, "auto"),
        engine_host=_engine_host(params, mode),
    )


def _engine_host(params: dict[str, str], mode: str) -> str:
    value = _choice(params, "engine_host", ENGINE_HOST, "auto")
    if value == "on" and mode != "sync":
        raise ConfigError(f"parameter 'engine_host' is 'on' but mode is '{mode}': instances that forward to an "
                          "engine host are sync instances (the host overlaps every instance's batches on its "
                          "contexts); set mode sync, or engine_host off")
    return value


def engine_host_on(cfg: PoolConfig) -> bool:
    """Whether this instance forwards to its model's engine host (trtpool.host). auto is off: measured
    side by side, the host served less than today's instances on the CPU (0.74-0.75x,
    bench/results/engine_host_cpu.json) and on the H200 for JPEG and CUDA-shm clients (0.47x and
    0.62x; bench/results/h200/engine_host.json), its one process's Python being the limit. `on` is the
    choice where GPU memory is: one copy of the model for every instance."""
    return cfg.engine_host == "on"
