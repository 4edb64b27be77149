"""A unary front for a decoupled trtpool model.

Triton's HTTP /infer and unary gRPC refuse decoupled models. The front is a
plain (non-decoupled) trtpool model with parameter `forward_to`: it declares
the target's inputs and outputs and forwards every request with BLS, all
requests of a batch at once, so the target's scheduler still sees them
together. gRPC streaming clients call the decoupled model directly.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from trtpool.errors import ConfigError
from trtpool_builder.folder.model_folder import read_config, write_config


def make_front_folder(
    repo: Path, target: str, name: str | None = None, max_queue_delay_microseconds: int = 100
) -> Path:
    """Write <repo>/<name> (default <target>_unary) forwarding to <repo>/<target>."""
    target_config = read_config(Path(repo) / target)
    if not target_config.model_transaction_policy.decoupled:
        raise ConfigError(f"model '{target}' is not decoupled: clients can call it directly")
    name = name or f"{target}_unary"
    config = mc.ModelConfig(name=name, backend="trtpool", max_batch_size=target_config.max_batch_size)
    config.input.extend(target_config.input)
    config.output.extend(target_config.output)
    if config.max_batch_size:
        config.dynamic_batching.max_queue_delay_microseconds = max_queue_delay_microseconds
    # The front only forwards: a CPU instance, no CUDA context of its own.
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    config.parameters["forward_to"].string_value = target
    folder = Path(repo) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    write_config(folder, config)
    return folder
