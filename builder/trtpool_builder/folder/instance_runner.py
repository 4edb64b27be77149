"""A Runner over trtpool's own serving path: ModelInstance (runtime, context pool, batch runner).

What `trtpool-accuracy` measures on a model folder is then what the server
answers, request splitting and output buffers included, not a bare session.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trtpool.engine.answer import Kept
from trtpool.instance import ModelInstance
from trtpool_builder.precision.accuracy import Runner
from trtpool_builder.precision.samples import Samples


def instance_runner(model_config: dict[str, Any], version_dir: Path, device: str) -> tuple[Runner, Callable[[], None]]:
    """(run, close): `run(feed)` sends a batched model's feed as one request per sample (as
    Triton's dynamic batcher would gather them), an unbatched model's as one request."""
    instance = ModelInstance(model_config, version_dir, device)
    batched = instance.runtime.signature.batched

    def run(feed: Samples) -> dict[str, np.ndarray]:
        count = len(next(iter(feed.values()))) if batched else 1
        requests = [{n: a[i : i + 1] for n, a in feed.items()} for i in range(count)] if batched else [feed]
        kept = [Kept() for _ in requests]
        instance.runner.run(requests, kept)
        errors = [k.error for k in kept if k.error is not None]
        if errors:
            raise errors[0]
        parts = [k.outputs for k in kept if k.outputs is not None]
        assert len(parts) == len(kept)  # every request answered, none with an error
        if not batched:
            return parts[0]
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    return run, instance.close
