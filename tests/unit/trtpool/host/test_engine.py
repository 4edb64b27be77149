"""The engine host's merging of instances' batches (trtpool.host.engine), without a process."""
from __future__ import annotations

import threading
import time

import pytest

from trtpool.errors import Overloaded
from trtpool.host.engine import Merger, Reply


class Recorder:
    """A serve function that records each merged batch and answers every request with its tag."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.batches: list[list[str]] = []
        self.hold_s = hold_s
        self.lock = threading.Lock()

    def __call__(self, requests, responders) -> None:
        with self.lock:
            self.batches.append([r["tag"] for r in requests])
        time.sleep(self.hold_s)
        for request, responder in zip(requests, responders):
            if request["tag"].startswith("bad"):
                responder.fail(ValueError(request["tag"]))
            else:
                responder.send({"tag": request["tag"]})


def submit(merger: Merger, tags: list[str], rows: int | None = None, threaded: bool = False,
           on_gpu: frozenset[str] = frozenset()) -> list:
    """One instance's batch, from this thread or (`threaded`) one of its own, as each instance's
    connection thread calls submit(); returns the list its answers land in, after a done event."""
    done = threading.Event()
    answers: list = [done]

    def deliver(result):
        answers.extend(result)
        done.set()
    reply = Reply(len(tags), deliver)
    call = lambda: merger.submit([{"tag": t} for t in tags], reply.responders(), rows or len(tags), on_gpu)  # noqa: E731
    if threaded:
        threading.Thread(target=call).start()
        time.sleep(0.02)
    else:
        call()
    return answers


def wait(answers: list, timeout: float = 5.0) -> list:
    assert answers[0].wait(timeout), "no answer"
    return answers[1:]


def test_batches_waiting_together_are_merged_up_to_the_largest_batch():
    serve = Recorder()
    merger = Merger(serve, workers=1, max_rows=5, batch_wait_us=200_000)
    first = submit(merger, ["a1", "a2"])
    second = submit(merger, ["b1", "b2"])
    third = submit(merger, ["c1", "c2"])   # 6 rows: does not fit with the first two
    assert [a["tag"] for a in wait(first)] == ["a1", "a2"]
    assert [a["tag"] for a in wait(second)] == ["b1", "b2"]
    assert [a["tag"] for a in wait(third)] == ["c1", "c2"]
    merger.close()
    assert serve.batches == [["a1", "a2", "b1", "b2"], ["c1", "c2"]]
    assert merger.merged == {2: 1, 1: 1}


def test_a_lone_batch_waits_no_longer_than_the_bound():
    merger = Merger(Recorder(), workers=1, max_rows=64, batch_wait_us=50_000)
    start = time.monotonic()
    assert [a["tag"] for a in wait(submit(merger, ["x"]))] == ["x"]
    took = time.monotonic() - start
    merger.close()
    assert 0.04 <= took < 2.0


def test_a_free_worker_serves_a_lone_batch_in_the_receiving_thread():
    threads = []
    merger = Merger(lambda requests, responders: (threads.append(threading.current_thread()),
                                                  [r.send({}) for r in responders]), 2, 8, 0)
    wait(submit(merger, ["x"]))
    merger.close()
    assert threads == [threading.current_thread()]


def test_busy_workers_merge_what_queues_behind_them_without_waiting():
    serve = Recorder(hold_s=0.2)
    merger = Merger(serve, workers=1, max_rows=64, batch_wait_us=0)
    first = submit(merger, ["a"], threaded=True)     # served at once: the one batch that may run
    time.sleep(0.05)
    rest = [submit(merger, [tag], threaded=True) for tag in ("b", "c", "d")]
    time.sleep(0.05)
    for answers in (first, *rest):
        wait(answers)
    merger.close()
    assert serve.batches == [["a"], ["b", "c", "d"]]


def test_batches_with_inputs_on_the_gpu_merge_only_with_their_like():
    """An input is all on the GPU or all in host memory in a merged batch (a context copies
    one input's parts one way): messages whose GPU inputs differ wait for batches of their own,
    and like ones behind them still merge past them."""
    serve = Recorder()
    merger = Merger(serve, workers=1, max_rows=64, batch_wait_us=200_000)
    gpu = frozenset({"input"})
    answers = [submit(merger, ["g1"], on_gpu=gpu), submit(merger, ["h1"]), submit(merger, ["g2"], on_gpu=gpu),
               submit(merger, ["h2"])]
    for each in answers:
        wait(each)
    merger.close()
    assert serve.batches == [["g1", "g2"], ["h1", "h2"]]


def test_each_request_gets_its_own_answer_or_error():
    merger = Merger(Recorder(), workers=2, max_rows=8, batch_wait_us=0)
    answers = wait(submit(merger, ["ok1", "bad2", "ok3"]))
    merger.close()
    assert answers[0] == {"tag": "ok1"} and answers[2] == {"tag": "ok3"}
    assert isinstance(answers[1], ValueError)


def test_a_serve_that_raises_answers_its_whole_batch_and_the_worker_goes_on():
    calls = []

    def serve(requests, responders):
        calls.append(len(requests))
        if len(calls) == 1:
            raise RuntimeError("broken")
        for responder in responders:
            responder.send({})
    merger = Merger(serve, workers=1, max_rows=8, batch_wait_us=0)
    failed = wait(submit(merger, ["a", "b"]))
    assert all("RuntimeError: broken" in str(a) for a in failed)
    assert wait(submit(merger, ["c"])) == [{}]
    merger.close()


def test_after_close_batches_are_refused_as_unavailable():
    merger = Merger(Recorder(), workers=1, max_rows=8, batch_wait_us=0)
    merger.close()
    answers = wait(submit(merger, ["late"]))
    assert isinstance(answers[0], Overloaded) and "being unloaded" in str(answers[0])


def test_a_reply_delivers_once_every_request_is_answered_once():
    delivered = []
    reply = Reply(2, delivered.append)
    first, second = reply.responders()
    first.send({"x": 1})
    first.fail(ValueError("again"))       # a responder answers once
    assert delivered == []
    second.fail(ValueError("no"))
    assert len(delivered) == 1 and delivered[0][0] == {"x": 1} and isinstance(delivered[0][1], ValueError)


@pytest.mark.parametrize("workers", [1, 3])
def test_busy_time_counts_wall_time_with_a_batch_running(workers):
    merger = Merger(Recorder(hold_s=0.1), workers=workers, max_rows=1, batch_wait_us=0)
    pending = [submit(merger, [str(i)], threaded=True) for i in range(3)]
    time.sleep(0.05)
    for answers in pending:
        wait(answers)
    merger.close()
    expected = 0.3 / workers
    assert expected * 0.9 <= merger.busy_ns / 1e9 < expected + 0.5
