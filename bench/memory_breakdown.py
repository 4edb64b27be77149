"""Where one torch-runtime instance's GPU memory goes (issue 21), step by step in
one process, read from nvidia-smi and torch's allocator:

  cuda_context     CUDA initialised by torch (context, loaded kernels)
  weights          the runtime made: the converted module's weights on the GPU
  context_N        context N made (stream, device input buffers; no graph yet)
  run_in_use       every context has run batch 1 and batch 16 at the served shape
                   (BERT: 128 tokens): graphs captured, pools grown to those buckets
  run_largest      every context has run the profile's largest batch and shapes

Each row: the GPU memory added since the process started (nvidia-smi's used
memory; the machine runs nothing else), the step's increase, the process's own
figure where nvidia-smi shows it, torch's allocated and reserved MiB. Triton's
own share (its CUDA context and CUDA memory pool) is the memory section's
`server_alone_mib` (bench/gpu_serving.py), read in a served run.

    python3 bench/memory_breakdown.py --model bert_base --onnx /tmp/bert_base.onnx --precision fp16 \\
        --contexts 4 --seq-len 128 --output $OUT/memory_breakdown_bert_base.json
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import gpu_memory
from bench.inprocess import example_options, inputs_for, load, parse_args
from bench.record import provenance, write_json
from trtpool.model.shapes import parse_profile
from trtpool_builder.examples import get_example, write_example

MIB = 1 << 20
IN_USE_BATCHES = (1, 16)


class Steps:
    """The rows of the table: the memory this process added since it started (the
    GPU's used memory less its reading before CUDA was initialised), each row with
    its increase over the previous one."""

    def __init__(self, torch: Any) -> None:
        self.torch, self.rows, self._baseline, self._last = torch, [], gpu_memory.used_mib(), 0

    def read(self, step: str) -> None:
        now = gpu_memory.used_mib() - self._baseline
        mine = gpu_memory.by_process().get(os.getpid())  # None where a container hides the pid
        row = {
            "step": step,
            "added_since_start_mib": now,
            "step_mib": now - self._last,
            "process_mib": mine[1] if mine else None,
            "torch_allocated_mib": round(self.torch.cuda.memory_allocated() / MIB),
            "torch_reserved_mib": round(self.torch.cuda.memory_reserved() / MIB),
        }
        self._last = now
        self.rows.append(row)
        print(row, file=sys.stderr, flush=True)


def largest_batch(args: argparse.Namespace) -> dict[str, list]:
    """The profile's largest shapes, filled as inputs_for fills a batch."""
    example = get_example(args.model)
    ranges = parse_profile(example.serving_profiles(**example_options(args))[0])
    first = next(iter(ranges.values())).max
    at_largest = argparse.Namespace(**{**vars(args), "seq_len": first[-1] if args.model == "bert_base" else None})
    return inputs_for(at_largest, first[0])


def run(context: Any, parts: dict[str, list]) -> None:
    context.submit(parts)
    context.complete()


def main() -> None:
    args = parse_args([*sys.argv[1:], "--runtime", "torch", "--batches", "1"])
    import torch

    if not args.onnx.is_file():
        write_example(args.model, args.onnx, **example_options(args))
    count = args.contexts[0]
    steps = Steps(torch)
    torch.zeros(1, device=args.device)
    steps.read("cuda_context")
    runtime = load(args, count)
    steps.read("weights")
    contexts = []
    try:
        for index in range(count):
            contexts.append(runtime.create_context(index))
            steps.read(f"context_{index + 1}")
        served = {batch: inputs_for(args, batch) for batch in IN_USE_BATCHES}
        for context in contexts:
            for parts in served.values():
                run(context, parts)
        steps.read("run_in_use")
        largest = largest_batch(args)
        for context in contexts:
            run(context, largest)
        steps.read("run_largest")
    finally:
        for context in contexts:
            context.close()
        runtime.close()
    report = {
        "benchmark": "memory_breakdown",
        **provenance(),
        "model": args.model,
        "precision": args.precision,
        "contexts": count,
        "served_seq_len": args.seq_len if args.model == "bert_base" else None,
        "in_use_batches": list(IN_USE_BATCHES),
        "steps": steps.rows,
    }
    if args.output:
        write_json(args.output, report)


if __name__ == "__main__":
    main()
