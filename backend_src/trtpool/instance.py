"""One trtpool model instance: config -> runtime -> context pool -> batch runner."""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from trtpool import config as pool_config
from trtpool.model_config import DEFAULT_ONNX_MAX_BATCH, SECTIONS, check_agreement
from trtpool.pool import ContextPool, auto_size
from trtpool.process_file import load_process_file
from trtpool.runtimes import load_runtime, resolve
from trtpool.runtimes.base import Runtime
from trtpool.serving import BatchObserver, BatchRunner
from trtpool.sidecar import read_sidecar
from trtpool.signature import Signature, is_batched
from trtpool.stages import Stage, StageObserver

log = logging.getLogger("trtpool")

# `contexts: auto` takes at most this many per mode, measured on an H200 with
# batch-1 clients (BENCHMARKS.md, "Contexts by mode"): a sync instance has one batch
# in flight (more contexts serve only a batch split above the largest profile);
# pipelined gained 1.32-1.37x from a second context and nothing from a third and
# fourth; decoupled 1.3-2.1x from four. Beyond these, contexts only cost memory.
AUTO_CONTEXTS = {"sync": 1, "pipelined": 2, "decoupled": 4}


def _read_signature(cfg: pool_config.PoolConfig) -> Signature:
    name, path = resolve(cfg)
    if name in ("tensorrt", "tensorrt_rtx"):
        # auto-complete runs without a device: the engine's sidecar describes it.
        return read_sidecar(path).signature()
    if name == "torch":
        # The torch runtime converts this ONNX file; ONNX Runtime reads its I/O on the CPU.
        cfg = replace(cfg, runtime="onnxruntime")
    runtime = load_runtime(cfg)
    try:
        return runtime.signature
    finally:
        runtime.close()


def describe(model_config: dict[str, Any], version_dir: Path) -> Signature:
    """The model's signature, for auto-completing a config that leaves fields out.

    max_batch_size 0 reads as "not given": an ONNX file carries no batch limit,
    so one is taken from the profile's first dimensions (else a default), but
    only for a model that has a batch axis. A model that has none (a recurrent
    state [1, 1, 128] beside a sequence, a scalar sample rate) stays unbatched."""
    provisional = dict(model_config)
    if not provisional.get("max_batch_size"):
        cfg = pool_config.load(provisional, version_dir, "cpu")
        if cfg.profiles:
            unbatched = _read_signature(cfg)
            if not is_batched(unbatched.inputs, unbatched.outputs):
                return unbatched
        provisional["max_batch_size"] = max(
            (r.max[0] for p in cfg.profiles for r in p.values() if r.max), default=DEFAULT_ONNX_MAX_BATCH
        )
    return _read_signature(pool_config.load(provisional, version_dir, "cpu"))


class ModelInstance:
    def __init__(self, model_config: dict[str, Any], version_dir: Path, device: str,
                 on_batch: BatchObserver | None = None, on_stage: StageObserver | None = None) -> None:
        self.cfg = pool_config.load(model_config, version_dir, device)
        process = load_process_file(version_dir, model_config)
        self.runtime: Runtime = load_runtime(self.cfg)
        try:
            check_agreement(model_config, self.runtime.signature, process.engine_faces if process else SECTIONS)
            size = self.cfg.contexts or auto_size(self.runtime, self.cfg.memory_fraction, self._ceiling())
            self.pool = ContextPool(self.runtime, size)
        except Exception:
            self.runtime.close()
            raise
        self.runner = BatchRunner(self.pool, on_batch, self.cfg.sub_batches)
        self.stage = None if process is None else Stage(
            process, self.runtime.signature, {o["name"]: o["data_type"] for o in model_config.get("output", [])},
            self.cfg.preprocess_threads, self.cfg.postprocess_threads, on_stage)
        log.info(
            "model '%s': runtime %s on %s, %d context(s), mode %s, max batch %d",
            self.cfg.model_name, self.runtime.name, device, size, self.cfg.mode,
            self.runtime.signature.max_batch_size,
        )

    def _ceiling(self) -> int:
        """The mode's measured useful number (a context per sub-batch at least); on
        the CPU, no more than cores (contention)."""
        ceiling = max(AUTO_CONTEXTS[self.cfg.mode], self.cfg.sub_batches)
        return min(ceiling, os.cpu_count() or 1) if self.cfg.device == "cpu" else ceiling

    def close(self) -> None:
        if self.stage is not None:
            self.stage.close()
        self.runner.close()
        self.pool.close()
