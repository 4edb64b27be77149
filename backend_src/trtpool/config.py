"""The model config's ``parameters`` read and validated into one frozen dataclass.

    parameters [
      { key: "runtime"         value: { string_value: "auto" } },   # auto | tensorrt | tensorrt_rtx | onnxruntime | torch | a registered name
      { key: "model_file"      value: { string_value: "" } },       # in the version folder; default: the runtime's usual name
      { key: "contexts"        value: { string_value: "auto" } },   # N, or auto: sized from free memory
      { key: "memory_fraction" value: { string_value: "0.5" } },    # share of free memory contexts: auto may use
      { key: "mode"            value: { string_value: "sync" } },   # sync | pipelined | decoupled
      { key: "profile"         value: { string_value: "..." } },    # shape ranges (trtpool.shapes); ';' between profiles
      { key: "max_queue_size"  value: { string_value: "256" } },    # decoupled: requests waiting beyond this are refused
      { key: "batch_wait_microseconds" value: { string_value: "500" } }, # decoupled: wait to fill a batch
      { key: "cancel_check_after_microseconds" value: { string_value: "10000" } }, # decoupled: see scheduler.py
      { key: "response_threads" value: { string_value: "1" } },     # pipelined: threads sending one batch's responses
      { key: "sub_batches"     value: { string_value: "1" } },         # sync, pipelined: a lone batch runs as up to N parts on N contexts
      { key: "forward_to"      value: { string_value: "bert_base" } }, # a unary front for a decoupled model
      { key: "precision"       value: { string_value: "fp32" } },      # torch runtime: fp32 | fp16
      { key: "sequence_buckets" value: { string_value: "" } },         # torch runtime: pad dynamic dims, e.g. 32,64,128
      { key: "metrics_interval_ms" value: { string_value: "1000" } },  # trtpool's metrics to Triton; 0: every batch
      { key: "cuda_graphs"     value: { string_value: "on" } },        # TensorRT runtime: on | off
      { key: "preprocess_threads"  value: { string_value: "auto" } },  # process.py: threads running preprocess
      { key: "postprocess_threads" value: { string_value: "auto" } },  # process.py: threads running postprocess
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
from trtpool.shapes import parse_profile
from trtpool.signature import ShapeRange

RUNTIMES = ("auto", "tensorrt", "tensorrt_rtx", "onnxruntime", "torch")
# Runtimes beyond the built-in ones are registered by packages installed in the
# serving environment (the operator's choice), never named as code in a config.
RUNTIME_ENTRY_POINTS = "trtpool.runtimes"
_REGISTERED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MODES = ("sync", "pipelined", "decoupled")
KNOWN_KEYS = {
    "runtime", "model_file", "contexts", "memory_fraction", "mode", "profile",
    "max_queue_size", "batch_wait_microseconds", "cancel_check_after_microseconds", "forward_to", "precision",
    "metrics_interval_ms", "sequence_buckets", "response_threads", "sub_batches", "cuda_graphs",
    "preprocess_threads", "postprocess_threads",
    "FORCE_CPU_ONLY_INPUT_TENSORS",
}
PRECISIONS = ("fp32", "fp16")
SWITCHES = ("on", "off")


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
    cancel_check_after_us: int
    max_batch_size: int
    device: str                   # "cpu" or "cuda:N"
    precision: str = "fp32"       # the torch runtime's compute precision
    metrics_interval_ms: int = 1000  # how often trtpool's metrics reach Triton; 0: after every batch
    sequence_buckets: tuple[int, ...] | None = None  # the torch runtime's padding of dynamic dims
    response_threads: int = 1     # pipelined mode: threads that send one batch's responses at once
    sub_batches: int = 1          # sync and pipelined: a lone batch runs as up to this many parts, one per context
    cuda_graphs: bool = True      # the TensorRT runtime captures and replays CUDA graphs
    preprocess_threads: int = 1   # process.py's preprocess workers (auto: stage_threads)
    postprocess_threads: int = 1  # process.py's postprocess workers (auto: stage_threads)


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


def _whole_number(params: dict[str, str], key: str, default: int, minimum: int = 1) -> int:
    text = params.get(key, "").strip() or str(default)
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"parameter '{key}': '{text}' is not an integer; expected a whole number >= {minimum}") from None
    if value < minimum:
        raise ConfigError(f"parameter '{key}': {value} is too small; expected a whole number >= {minimum}")
    return value


def stage_threads() -> int:
    """process.py's workers per stage when the config says auto: one per core, since Pillow's
    decode and resize release the GIL (BENCHMARKS.md, "Decode library": on the shared 2-core
    VM a second thread measured 0.5-1.9x, noise-bound)."""
    return max(1, len(os.sched_getaffinity(0)))


def _threads(params: dict[str, str], key: str) -> int:
    if params.get(key, "").strip() in ("", "auto"):
        return stage_threads()
    return _whole_number(params, key, 1)


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


def _sizes(params: dict[str, str], key: str) -> tuple[int, ...] | None:
    text = params.get(key, "").strip()
    if not text:
        return None
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise ConfigError(f"parameter '{key}': '{text}' is not accepted; expected sizes like 32,64,128") from None
    if sizes[0] < 1:
        raise ConfigError(f"parameter '{key}': every size in '{text}' must be at least 1")
    return sizes


def load(model_config: dict[str, Any], version_dir: Path, device: str) -> PoolConfig:
    """Validate the parameters; every error names the parameter and the accepted values."""
    params = parameters_of(model_config)
    unknown = sorted(set(params) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown}; trtpool accepts {sorted(KNOWN_KEYS)}")

    contexts_text = params.get("contexts", "").strip() or "auto"
    contexts = None if contexts_text == "auto" else _whole_number(params, "contexts", 1)

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

    sub_batches = _whole_number(params, "sub_batches", 1)
    if sub_batches > 1 and mode == "decoupled":
        raise ConfigError("parameter 'sub_batches' applies to sync and pipelined mode; a decoupled model's "
                          "workers already keep its contexts busy: leave it at 1")

    profile_text = params.get("profile", "").strip()
    profiles = tuple(parse_profile(p) for p in profile_text.split(";") if p.strip())

    return PoolConfig(
        model_name=model_config.get("name", ""),
        version_dir=version_dir,
        runtime=_runtime(params),
        model_file=params.get("model_file", "").strip(),
        contexts=contexts,
        memory_fraction=memory_fraction,
        mode=mode,
        profiles=profiles,
        max_queue_size=_whole_number(params, "max_queue_size", 256),
        batch_wait_us=_whole_number(params, "batch_wait_microseconds", 500),
        cancel_check_after_us=_whole_number(params, "cancel_check_after_microseconds", 10_000, minimum=0),
        max_batch_size=int(model_config.get("max_batch_size", 0)),
        device=device,
        precision=_choice(params, "precision", PRECISIONS, "fp32"),
        metrics_interval_ms=_whole_number(params, "metrics_interval_ms", 1000, minimum=0),
        sequence_buckets=_sizes(params, "sequence_buckets"),
        response_threads=_whole_number(params, "response_threads", 1),
        sub_batches=sub_batches,
        cuda_graphs=_choice(params, "cuda_graphs", SWITCHES, "on") == "on",
        preprocess_threads=_threads(params, "preprocess_threads"),
        postprocess_threads=_threads(params, "postprocess_threads"),
    )
