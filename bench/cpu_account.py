"""Where the CPU goes while perf_analyzer loads one model: CPU time per request of tritonserver's own
process, the model's stubs, its engine host (if any) and the clients (perf_analyzer, and any other
child the bench waited for meanwhile, such as nvidia-smi's samples), and how busy the whole machine
was. On a machine whose cores are all busy, throughput follows the CPU that each request costs, and
this says whose it is."""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil

Groups = Callable[[], dict[str, list[int]]]  # a class of processes -> their pids now


def _cpu_seconds(pid: int) -> float | None:
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:  # gone (a stub or host that ended mid-run): its share is lost, not guessed
        return None
    return times.user + times.system


def _children_seconds() -> float:
    """CPU of this process's waited-for children: perf_analyzer, once it has exited."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of every core since boot."""
    times = psutil.cpu_times()._asdict()
    total = sum(spent for name, spent in times.items() if name not in ("guest", "guest_nice"))  # in user, nice
    return total - times["idle"] - times.get("iowait", 0.0), total


@dataclass
class CpuAccount:
    """CPU seconds per class of process over one `measuring` block, and the machine's busy share."""

    seconds: dict[str, float] = field(default_factory=dict)
    machine_busy_percent: float | None = None

    def per_request_us(self, requests: int) -> dict[str, float]:
        return {name: round(1e6 * spent / requests, 1) for name, spent in self.seconds.items()} if requests else {}


@contextmanager
def measuring(groups: Groups) -> Iterator[CpuAccount]:
    """Account the CPU of `groups` (read at the start: processes started meanwhile are not counted)
    and of the children this process waits for inside the block."""
    pids = groups()
    start = {name: {pid: _cpu_seconds(pid) for pid in members} for name, members in pids.items()}
    children, (busy, total) = _children_seconds(), _machine_busy()
    account = CpuAccount()
    yield account
    for name, members in start.items():
        ends = {pid: _cpu_seconds(pid) for pid in members}
        account.seconds[name] = sum(
            end - begun for pid, begun in members.items() if begun is not None and (end := ends[pid]) is not None
        )
    account.seconds["clients"] = _children_seconds() - children  # perf_analyzer (and nvidia-smi's samples)
    busy_end, total_end = _machine_busy()
    account.machine_busy_percent = round(100 * (busy_end - busy) / max(total_end - total, 1e-9), 1)
