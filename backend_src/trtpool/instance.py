"""One trtpool model instance: config -> runtime -> context pool -> batch runner."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from trtpool import parameters
from trtpool.engine.answer import Responder
from trtpool.engine.batching import BatchObserver, BatchRunner
from trtpool.engine.pool import ContextPool, auto_size
from trtpool.errors import ConfigError
from trtpool.model.config_pbtxt import DEFAULT_ONNX_MAX_BATCH, SECTIONS, check_agreement
from trtpool.model.signature import Signature, is_batched
from trtpool.process.faces import choose_faces
from trtpool.process.file import ProcessFile, load_process_file
from trtpool.process.observe import StageObserver
from trtpool.process.stages import Stage
from trtpool.process.workers import ProcessPreprocess
from trtpool.runtimes import load_runtime, offline_signature
from trtpool.runtimes.base import Runtime

log = logging.getLogger("trtpool")

# `contexts: auto` takes at most this many per mode, measured on an H200 with batch-1 clients
# (bench/results/h200/gpu_serving_contexts_resnet50.json, gpu_serving_contexts_bert_base.json):
# a sync instance has one batch in flight (more contexts serve only a batch split above the
# largest profile); pipelined gained from a second context and nothing from a third and fourth;
# decoupled gained up to four. Beyond these, contexts only cost memory.
AUTO_CONTEXTS = {"sync": 1, "pipelined": 2, "decoupled": 4}
# An engine host overlaps the batches of every instance on its contexts. Two, measured on an H200 with 6
# and 12 thin instances x 1, 2 and 4 contexts (bench/results/h200/engine_host_sweep_resnet50.json,
# engine_host_sweep_jpeg.json): ResNet-50 over gRPC served 1.10-1.21x with two than with four (fewer,
# larger engine batches; one was within 0.98-1.06x of two), JPEG 0.98-1.03x, and four held 1.8-2.0x the
# GPU memory under load.
HOSTED_CONTEXTS = 2


def describe(model_config: dict[str, Any], version_dir: Path) -> Signature:
    """The model's signature, for auto-completing a config that leaves fields out.

    A config that declares its inputs is complete: its max_batch_size, 0 included, is
    the decision (trtpool-model writes it: builder/trtpool_builder/batch_axis.py).
    Otherwise max_batch_size 0 reads as "not given": a model whose declared shapes
    give it no batch axis (no inputs, a fixed first dimension, a scalar, an output
    without one) stays unbatched; one that has one takes its limit from the profile's
    first dimensions (else a default), since an ONNX file carries none."""
    provisional = dict(model_config)
    if not provisional.get("max_batch_size") and not provisional.get("input"):
        cfg = parameters.load(provisional, version_dir, "cpu")
        try:
            unbatched = offline_signature(cfg)
        except ConfigError:  # dynamic dimensions and no profile: only a batch axis explains them
            unbatched = None
        if unbatched is not None and not is_batched(unbatched.inputs, unbatched.outputs):
            return unbatched
        provisional["max_batch_size"] = max(
            (r.max[0] for p in cfg.profiles for r in p.values() if r.max), default=DEFAULT_ONNX_MAX_BATCH
        )
    return offline_signature(parameters.load(provisional, version_dir, "cpu"))


def check_fits(runtime: Runtime, contexts: int, device: str) -> None:
    """`contexts` contexts must fit in the free memory of their device (the host's for "cpu")
    before a single one is allocated."""
    each = max(1, runtime.context_memory_bytes())
    free = runtime.free_memory_bytes()
    if contexts * each > free:
        fits = free // each
        advice = (
            f"expected at most {fits}, or auto"
            if fits
            else "not even one fits: make the profile's largest shapes smaller"
        )
        raise ConfigError(
            f"parameter 'contexts': {contexts} contexts of {each:,} bytes each need "
            f"{contexts * each:,} bytes, but {device} has {free:,} free; {advice}"
        )


class ModelInstance:
    def __init__(
        self,
        model_config: dict[str, Any],
        version_dir: Path,
        device: str,
        on_batch: BatchObserver | None = None,
        on_stage: StageObserver | None = None,
        hosted: bool = False,
    ) -> None:
        """`hosted`: loaded in an engine host (trtpool.host), which serves every instance's batches."""
        self.cfg = parameters.load(model_config, version_dir, device)
        self.hosted = hosted
        process = load_process_file(version_dir, model_config)
        self.runtime: Runtime = load_runtime(self.cfg)
        try:
            check_agreement(model_config, self.runtime.signature, process.engine_sections if process else SECTIONS)
            size = self._size()
            self.pool = ContextPool(self.runtime, size, self.cfg.elastic)
        except Exception:
            self.runtime.close()
            raise
        self.runner = BatchRunner(self.pool, on_batch)
        self.pre_processes: ProcessPreprocess | None = None
        self.stage: Stage | None = None
        if process is not None:
            try:
                self.stage = self._stage(process, model_config, version_dir, on_stage)
            except Exception:  # the preprocess workers did not start
                self.close()
                raise
        log.info(
            "model '%s': runtime %s on %s, %s context(s), mode %s, max batch %d",
            self.cfg.model_name,
            self.runtime.name,
            device,
            f"{self.pool.stats.minimum} to {size}" if self.pool.elastic else size,
            self.cfg.mode,
            self.runtime.signature.max_batch_size,
        )

    def _stage(
        self, process: ProcessFile, model_config: dict[str, Any], version_dir: Path, on_stage: StageObserver | None
    ) -> Stage:
        """The process file's stage; its preprocess in worker processes with preprocess_processes.
        preprocess_threads auto: one per core for the per-request face (Pillow releases the GIL),
        one per context for the batch face (a batch decoding while another runs: more threads
        only contend for the stub's GIL, measured on the H200, BENCHMARKS.md "GPU pipeline")."""
        faces = choose_faces(process, self.cfg.process_faces, self.cfg.device)
        pre_threads = self.cfg.preprocess_threads or (self.pool.size if faces.batch_pre else parameters.stage_threads())
        if faces.batch_pre and self.cfg.preprocess_processes:
            raise ConfigError(
                f"parameter 'preprocess_processes': {self.cfg.preprocess_processes} worker processes "
                f"run preprocess(inputs), but this instance serves {process.path.name}'s "
                "preprocess_batch (parameter 'process_faces' is "
                f"'{self.cfg.process_faces}' on {self.cfg.device}); expected 0, "
                "or process_faces 'request'"
            )
        if not faces.batch_pre and process.preprocess is not None and self.cfg.preprocess_processes:
            self.pre_processes = ProcessPreprocess(version_dir, model_config, self.cfg.preprocess_processes)
            process = replace(process, preprocess=self.pre_processes)
            pre_threads = max(pre_threads, self.cfg.preprocess_processes)  # a thread waits on each worker
        if faces.batch_post and process.outputs_on_device:
            kept = self.runtime.keep_outputs_on_device()
            log.info(
                "model '%s': postprocess_batch takes the engine's outputs %s",
                self.cfg.model_name,
                "on the device" if kept else f"on the host (the {self.runtime.name} runtime copies them there)",
            )
        return Stage(
            process,
            self.runtime.signature,
            {o["name"]: o["data_type"] for o in model_config.get("output", [])},
            pre_threads,
            self.cfg.postprocess_threads,
            self.cfg.max_queue_size,
            on_stage,
            faces,
            self.cfg.device,
        )

    def _size(self) -> int:
        """The most contexts at once: `contexts` or `max_contexts`, else sized from memory
        (for an elastic pool, no fewer than min_contexts). Those made at load (all of a fixed
        pool, min_contexts of an elastic one) must fit; auto's floor of 1 may not."""
        size = self.cfg.most_contexts or auto_size(self.runtime, self.cfg.memory_fraction, self._ceiling())
        elastic = self.cfg.elastic
        size = max(size, elastic.min_contexts) if elastic else size
        check_fits(self.runtime, elastic.min_contexts if elastic else size, self.cfg.device)
        return size

    def _ceiling(self) -> int:
        """The mode's measured useful number; on the CPU, no more than cores (contention)."""
        ceiling = HOSTED_CONTEXTS if self.hosted else AUTO_CONTEXTS[self.cfg.mode]
        return min(ceiling, os.cpu_count() or 1) if self.cfg.device == "cpu" else ceiling

    def serve(self, requests: list[dict[str, Any]], responders: list[Responder], inline: bool) -> None:
        """Run a batch of requests and answer each through its responder: through the process
        file's stages when there is one (`inline`: postprocess_batch in the thread that completes
        the batch), else straight from the engine. Detached: the responders may answer after the
        context has taken another batch."""
        if self.stage is not None:
            requests, responders = self.stage.before(requests, responders, inline=inline)
        self.runner.run(requests, responders, detach=True)

    def close(self) -> None:
        if self.stage is not None:
            self.stage.close()
        if self.pre_processes is not None:
            self.pre_processes.close()
        self.runner.close()
        self.pool.close()
