"""trtpool-tune's perf_analyzer runs: a stop signal during clean-up is held until it is done."""
from __future__ import annotations

import os
import signal
import time

import pytest

from trtpool_ops.tune.cli import stop_on_signal
from trtpool_ops.tune.perf import sheltered


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_during_clean_up_is_held_until_it_is_done(stop_signal):
    """A Ctrl-C while a server is being stopped must neither cut the stop short nor be lost."""
    previous = {s: signal.signal(s, stop_on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with sheltered():
                os.kill(os.getpid(), stop_signal)
                time.sleep(0.05)   # the handler has run by now
                done.append("the rest of the clean-up")
        assert done == ["the rest of the clean-up"]
        assert signal.getsignal(signal.SIGINT) is stop_on_signal
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
