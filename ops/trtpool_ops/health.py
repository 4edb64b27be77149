"""trtpool-health: exit 0 only if every READY model (or every named one) answers a tiny request.

For a Kubernetes liveness probe or a load balancer's active check:
Triton's /v2/health endpoints stay 200 while a model's stub is dead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtpool_ops.probe import ProbeResult, probe_model
from trtpool_ops.repository import model_states


def check(url: str, models: Sequence[str], timeout: float) -> list[ProbeResult]:
    with grpcclient.InferenceServerClient(url) as client:
        states = {s.name: s for s in model_states(client)}
    wanted = models or sorted(name for name, s in states.items() if s.state == "READY")
    results = []
    for model in wanted:
        state = states.get(model)
        if state is None or state.state != "READY":
            detail = f"not ready ({state.state} {state.reason})" if state else "not in the repository"
            results.append(ProbeResult(model, False, detail))
        else:
            results.append(probe_model(url, model, timeout))
    return results


def speaks_http(url: str) -> bool:
    """Whether `url` is a Triton HTTP endpoint (trtpool-health pointed at the HTTP port, not gRPC's)."""
    try:
        with httpclient.InferenceServerClient(url, connection_timeout=2, network_timeout=2) as client:
            client.is_server_live()
        return True
    except Exception:  # noqa: BLE001 - anything but an HTTP answer: not that mistake
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="trtpool-health", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:8001", help="the server's gRPC host:port")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per model")
    parser.add_argument("models", nargs="*", help="models that must be alive (default: every READY one)")
    args = parser.parse_args(argv)
    try:
        results = check(args.url, args.models, args.timeout)
    except InferenceServerException as exc:
        print(f"trtpool-health: server at {args.url} not answering: {exc}", file=sys.stderr)
        if speaks_http(args.url):
            print(
                f"trtpool-health: {args.url} is tritonserver's HTTP port; trtpool-health speaks gRPC: give "
                "--url HOST:GRPC_PORT (trtpool-serve's --grpc-port, 8001 by default)",
                file=sys.stderr,
            )
        return 1
    for result in results:
        print(f"{result.model}: {'alive' if result.alive else 'DEAD'} ({result.detail})")
    return 0 if all(r.alive for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
