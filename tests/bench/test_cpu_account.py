"""bench/cpu_account.py: CPU per request charged to the process that spent it."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil

from bench.cpu_account import measuring

BUSY_THEN_IDLE = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\ntime.sleep(60)"
BUSY_CHILD = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"


def test_each_group_is_charged_its_own_cpu_and_a_waited_child_counts_as_the_clients():
    worker = subprocess.Popen([sys.executable, "-c", BUSY_THEN_IDLE])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with measuring(lambda: {"worker": [worker.pid], "idle": [idle.pid]}) as account:
            subprocess.run([sys.executable, "-c", BUSY_CHILD], check=True)  # as perf_analyzer is run
            while sum(psutil.Process(worker.pid).cpu_times()[:2]) < 0.4:  # until the worker has spent its 0.4 s
                time.sleep(0.02)
    finally:
        worker.kill()
        idle.kill()
    assert 0.3 <= account.seconds["worker"] < 1.0, account.seconds
    assert account.seconds["idle"] < 0.1, account.seconds
    assert 0.3 <= account.seconds["clients"] < 1.0, account.seconds
    assert 0 < account.machine_busy_percent <= 100
    per_request = account.per_request_us(1000)
    assert per_request["worker"] == round(1e6 * account.seconds["worker"] / 1000, 1)
    assert account.per_request_us(0) == {}
