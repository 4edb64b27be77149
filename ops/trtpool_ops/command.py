"""The tritonserver command line that trtpool-serve runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Flags trtpool-serve sets itself: the watchdog needs explicit model control,
# and --strict decides the two start-up policies.
MANAGED_FLAGS = ("--model-repository", "--model-control-mode", "--load-model", "--exit-on-error", "--strict-readiness")


@dataclass(frozen=True)
class ServeOptions:
    repository: Path
    models: tuple[str, ...] = ()  # (): every model folder in the repository
    address: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    strict: bool = False  # any model that fails to load stops the server
    passthrough: tuple[str, ...] = ()  # further tritonserver flags, passed as given


def _flag_name(argument: str) -> str:
    return argument.split("=", 1)[0]


def check_passthrough(arguments: Sequence[str]) -> None:
    """Refuse flags that trtpool-serve manages itself, naming its own option for each."""
    clashes = sorted({_flag_name(a) for a in arguments if _flag_name(a) in MANAGED_FLAGS})
    if clashes:
        raise ValueError(f"trtpool-serve sets {', '.join(clashes)} itself: use --repo, --models and --strict instead")


def tritonserver_command(tritonserver: str, options: ServeOptions) -> list[str]:
    """tritonserver in explicit model-control mode, loading the chosen models at start-up.

    Not strict (the default): a model that fails to load is reported and the
    others serve; server readiness then ignores it (clients check model readiness).
    Strict: one failure stops the server and readiness needs every model.
    """
    check_passthrough(options.passthrough)
    strict = "true" if options.strict else "false"
    loads = [f"--load-model={name}" for name in options.models] or ["--load-model=*"]
    return [
        tritonserver,
        f"--model-repository={options.repository}",
        "--model-control-mode=explicit",
        *loads,
        f"--exit-on-error={strict}",
        f"--strict-readiness={strict}",
        f"--http-address={options.address}",
        f"--http-port={options.http_port}",
        f"--grpc-address={options.address}",
        f"--grpc-port={options.grpc_port}",
        f"--metrics-address={options.address}",
        f"--metrics-port={options.metrics_port}",
        "--allow-metrics=true",
        *options.passthrough,
    ]
