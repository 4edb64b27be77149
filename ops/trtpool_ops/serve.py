"""trtpool-serve: serve a model repository with tritonserver and the trtpool backend.

    trtpool-serve --repo DIR [--models A B] [--strict] [any tritonserver flag ...]

Models load in explicit model-control mode. A model that fails to load is
listed with Triton's reason and the others serve; --strict makes any failure
stop the server (for production). While serving, a watchdog sends each model
a tiny request and watches its stub processes every --watch-interval seconds;
a model whose stub died is unloaded and loaded again (new stubs), or with
--on-dead-stub=exit the server is stopped and this command exits with status
3, for a supervisor to restart it (Triton 2.51 never frees a model whose stub
died while serving: each reload keeps the old instances' memory).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from trtpool_ops.command import ServeOptions, tritonserver_command
from trtpool_ops.locate import find_tritonserver
from trtpool_ops.repository import ModelState, model_states
from trtpool_ops.server_log import ServerOutput, start_errors
from trtpool_ops.shm import own_prefix, prefix_flag, remove_regions
from trtpool_ops.stubs import dead_stub_count
from trtpool_ops.watch_metrics import WatchMetrics
from trtpool_ops.watchdog import ON_DEAD_STUB, Watchdog

EXIT_DEAD_STUB = 3


def say(message: str) -> None:
    print(f"[serve] {message}", flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trtpool-serve",
        description=__doc__,
        formatter_class=HelpFormatter,
        epilog="Unrecognised flags go to tritonserver (e.g. --log-verbose=1).",
    )
    p.add_argument("--repo", type=Path, required=True, help="the model repository (a folder of model folders)")
    p.add_argument("--models", nargs="+", default=[], metavar="NAME", help="load only these (default: all)")
    p.add_argument(
        "--address",
        default="127.0.0.1",
        help="listen address: loopback, so nothing outside this machine reaches the server; 0.0.0.0 in a container",
    )
    p.add_argument("--http-port", type=int, default=8000, help="tritonserver's HTTP port")
    p.add_argument("--grpc-port", type=int, default=8001, help="tritonserver's gRPC port (trtpool-health's)")
    p.add_argument("--metrics-port", type=int, default=8002, help="tritonserver's Prometheus metrics port")
    p.add_argument(
        "--strict",
        action="store_true",
        help="any model that fails to load stops the server; readiness needs every model",
    )
    p.add_argument(
        "--watch-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between liveness checks of every model; 0: no watchdog",
    )
    p.add_argument(
        "--probe-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds the watchdog waits for a model's answer before it counts the model dead",
    )
    p.add_argument(
        "--watch-metrics-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve the watchdog's Prometheus metrics (deaths, recoveries, models dead now) on "
        "--address:PORT/metrics; 0: not served",
    )
    p.add_argument(
        "--on-dead-stub",
        choices=ON_DEAD_STUB,
        default="reload",
        help=f"reload the model, or stop the server and exit {EXIT_DEAD_STUB}",
    )
    p.add_argument("--log", type=Path, help="write tritonserver's log here (default: this terminal)")
    p.add_argument(
        "--tritonserver",
        help="the tritonserver executable (default: $TRTPOOL_TRITONSERVER, "
        "else the set-up's .triton/bin/tritonserver beside this .venv, else from PATH)",
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds tritonserver may take to load the models and answer; beyond them the start "
        "has failed (an exit, or a server that listens but is not live, is reported at once)",
    )
    return p


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The module's docstring as written, and each flag's default where it has a value."""

    def _get_help_string(self, action: argparse.Action) -> str:
        assert action.help is not None  # argparse asks only for flags with a help text
        unset = action.default is None or action.default is False or action.default in ([], argparse.SUPPRESS)
        shown = not unset and "(default" not in action.help
        return f"{action.help} (default: %(default)s)" if shown else action.help


def check_repository(repo: Path) -> None:
    """Refuse at once what tritonserver would only log ("failed to stat file") while never becoming live."""
    if not repo.is_dir():
        raise ValueError(f"--repo {repo}: {'is not a folder' if repo.exists() else 'does not exist'}")
    if not any(entry.is_dir() and not entry.name.startswith(".") for entry in repo.iterdir()):
        raise ValueError(
            f"--repo {repo}: holds no model folder (a model repository is a folder of <name>/config.pbtxt folders)"
        )


def control_url(options: ServeOptions) -> str:
    host = "127.0.0.1" if options.address in ("0.0.0.0", "") else options.address
    return f"{host}:{options.grpc_port}"


def wait_live(process: subprocess.Popen, url: str, timeout: float) -> str:
    """How the start ended: "live" once the server says so (tritonserver loads the start-up models
    before it listens); "failed" at once when it exits, or listens but says it is not live (its
    start failed: a repository it cannot read, say; it would stay so); "timeout"."""
    deadline = time.monotonic() + timeout
    with grpcclient.InferenceServerClient(url) as client:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                return "live" if client.is_server_live(client_timeout=2) else "failed"
            except InferenceServerException:
                pass
            time.sleep(0.25)
    return "timeout" if process.poll() is None else "failed"


def report(states: Sequence[ModelState]) -> list[ModelState]:
    """Print every model's load result; return the ones that failed to load."""
    failed = [s for s in states if s.state not in ("READY", "")]
    for state in states:
        if state.state == "READY":
            say(f"  {state.name}: READY")
        elif state.state:
            reason = state.reason.split("\n\n")[0] or state.state  # the error, not its traceback
            say(f"  {state.name}: FAILED TO LOAD: {reason}")
    skipped = [s.name for s in states if not s.state]
    if skipped:
        say(f"  not loaded (not in --models): {', '.join(skipped)}")
    return failed


def print_endpoints(options: ServeOptions, ready: Sequence[str]) -> None:
    host = control_url(options).rsplit(":", 1)[0]
    example = ready[0] if ready else "MODEL"
    say(
        f"HTTP     http://{host}:{options.http_port}   (curl http://{host}:{options.http_port}/v2/models/{example}/config)"
    )
    say(f"gRPC     {host}:{options.grpc_port}")
    say(f"metrics  http://{host}:{options.metrics_port}/metrics")
    health = Path(sysconfig.get_path("scripts")) / "trtpool-health"  # beside trtpool-serve, maybe not on PATH
    say(
        f"health   {health if health.exists() else 'trtpool-health'} --url {host}:{options.grpc_port}   "
        "(a tiny request per model)"
    )


PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LIBC = ctypes.CDLL(None, use_errno=True)


def _ends_with(parent: int) -> Callable[[], None]:
    """A preexec_fn: the child is sent SIGTERM (Triton's drain, then its stubs stop) when
    `parent` dies, by SIGKILL too. A parent that died before the child got here is seen at once.
    The kernel sends it when the thread that started the child ends: start() is called from
    threads that outlive the server (serve's main thread, trtpool-tune's `serving` block)."""

    def arm() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def start(command: list[str], output: IO[bytes] | None = None) -> subprocess.Popen:
    """tritonserver in its own process group (stopping it stops its stubs too), ending when the
    calling thread does, however it ends (_ends_with); its output into `output` (trtpool-tune's log
    file), else a pipe that ServerOutput relays."""
    return subprocess.Popen(
        command,
        stdout=output if output is not None else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_ends_with(os.getpid()),
    )


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL tritonserver's process group: the server and any stub it left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def ask_to_stop(process: subprocess.Popen, signum: int, grace: float = 60.0) -> None:
    """Triton drains in-flight requests (--exit-timeout-secs) on SIGINT/SIGTERM, then stops its
    stubs; after `grace` seconds the group is killed. Returns at once (safe in a signal handler)."""
    if process.poll() is None:
        process.send_signal(signum)
        timer = threading.Timer(grace, kill_group, (process,))
        timer.daemon = True
        timer.start()


def wait_interruptibly(process: subprocess.Popen) -> int:
    """process.wait() in slices. Python runs a signal handler in the main thread, between bytecodes; the
    kernel may hand SIGINT to another thread (the watchdog's, the output relay's), and a main thread asleep in
    one blocking waitpid would then never run the handler, nor stop the server. In slices it runs within 50 ms."""
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return process.wait(timeout=1.0)


def exit_timeout(passthrough: Sequence[str]) -> str:
    """tritonserver's --exit-timeout-secs as given (30 by default)."""
    for i, argument in enumerate(passthrough):
        if argument.startswith("--exit-timeout-secs="):
            return argument.split("=", 1)[1]
        if argument == "--exit-timeout-secs" and i + 1 < len(passthrough):
            return passthrough[i + 1]
    return "30"


def say_stopping(dead: int, timeout: str) -> None:
    """What stopping will do; `dead`: the stubs that had died before it began (dead_stub_count)."""
    say(
        f"stopping tritonserver: it drains in-flight requests, then unloads every model "
        f"(at most --exit-timeout-secs, {timeout} s)"
    )
    if dead:
        say(
            f"{dead} stub process(es) died: Triton 2.51 cannot unload their models, so it waits the whole "
            f"{timeout} s and then exits with status 1"
        )


def start_watchdog(
    args: argparse.Namespace, url: str, process: subprocess.Popen, stopping: threading.Event, dead_stub: threading.Event
) -> None:
    def exit_server() -> None:
        dead_stub.set()
        ask_to_stop(process, signal.SIGTERM)

    metrics = WatchMetrics()
    if args.watch_metrics_port:
        metrics.serve(args.address, args.watch_metrics_port)
        say(f"watchdog metrics: http://{args.address}:{args.watch_metrics_port}/metrics")
    watchdog = Watchdog(url, process.pid, say, args.probe_timeout, args.on_dead_stub, exit_server, metrics)
    threading.Thread(target=watchdog.run, args=(args.watch_interval, stopping), daemon=True).start()
    action = "reloaded" if args.on_dead_stub == "reload" else f"stop the server (exit {EXIT_DEAD_STUB})"
    say(f"watchdog: every {args.watch_interval:g} s, a tiny request per model; models with a dead stub: {action}")


def serve(args: argparse.Namespace, passthrough: list[str]) -> int:
    prefix = own_prefix(passthrough)
    if prefix:
        passthrough = [*passthrough, prefix_flag(prefix)]
    try:
        return run_server(args, passthrough)
    finally:
        if prefix and remove_regions(prefix):
            say("removed the shared-memory regions tritonserver left in /dev/shm")


def run_server(args: argparse.Namespace, passthrough: list[str]) -> int:
    check_repository(args.repo)
    options = ServeOptions(
        args.repo.resolve(),
        tuple(args.models),
        args.address,
        args.http_port,
        args.grpc_port,
        args.metrics_port,
        args.strict,
        tuple(passthrough),
    )
    command = tritonserver_command(find_tritonserver(args.tritonserver), options)
    say("tritonserver command: " + shlex.join(command))
    log = args.log.open("wb") if args.log else None
    process = start(command)
    assert process.stdout is not None  # a pipe: start() was given no output file
    output = ServerOutput(process.stdout, log, say)
    stopping = threading.Event()  # set by a signal: the watchdog ends, the exit is clean
    dead_stub = threading.Event()  # set by the watchdog with --on-dead-stub=exit

    def on_signal(signum: int, _frame: object) -> None:
        # The signal goes on to tritonserver first; the words come from a thread of their own. A handler
        # runs inside whatever the main thread was doing, a print to stdout included, where a print of its
        # own would fail (a reentrant write) before the server heard of the signal.
        stopping.set()
        dead = dead_stub_count(process.pid)  # before the stubs that stopping ends are reaped
        ask_to_stop(process, signum)
        threading.Thread(target=say_stopping, args=(dead, exit_timeout(passthrough)), daemon=True).start()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    url = control_url(options)
    started = wait_live(process, url, args.start_timeout)
    if started != "live":
        if stopping.is_set():
            process.wait()
            kill_group(process)
            return 0
        if started == "timeout":
            say(f"tritonserver not up after {args.start_timeout:g} s")
        elif process.poll() is None:
            say("tritonserver listens but is not live: its start failed (below); stopping it")
        kill_group(process)  # the server, or stubs it left
        process.wait()
        output.finish()
        say(f"tritonserver exited with status {process.returncode} during start-up")
        own_flags = [flag for action in parser()._actions for flag in action.option_strings]
        errors = start_errors(output.lines, own_flags)
        if errors:
            print(errors, file=sys.stderr)
        return 1
    output.started()
    with grpcclient.InferenceServerClient(url) as client:
        states = model_states(client)
    failed = report(states)
    ready = [s.name for s in states if s.state == "READY"]
    say(f"ready: {len(ready)} model(s) serving" + (f", {len(failed)} failed to load (listed above)" if failed else ""))
    print_endpoints(options, ready)
    if args.watch_interval > 0:
        start_watchdog(args, url, process, stopping, dead_stub)
    say("Ctrl-C stops the server.")
    code = wait_interruptibly(process)
    kill_group(process)
    output.finish()
    if log:
        log.close()
    if dead_stub.is_set():
        return EXIT_DEAD_STUB
    if stopping.is_set():
        if code in (0, -signal.SIGINT, -signal.SIGTERM, -signal.SIGKILL):
            return 0
        say(
            f"tritonserver exited with status {code}: a model did not unload within the exit timeout "
            "(a dead stub, or a request never answered); its processes are stopped, nothing is left "
            f"running. Status {code} here means an unclean stop, not a failed request"
        )
        return code
    say(f"tritonserver exited unexpectedly with status {code}")
    stopping.set()
    return code or 1


def main(argv: Sequence[str] | None = None) -> int:
    args, passthrough = parser().parse_known_args(argv)
    try:
        return serve(args, passthrough)
    except ValueError as exc:
        print(f"trtpool-serve: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
