"""The offload runs each call on a thread of its own, reuses a thread its call left idle, never
queues a call behind another, and ends threads no call needed for a while."""

from __future__ import annotations

import threading
import time

import pytest

from horizon_broker._core.errors import ResourceExhausted
from horizon_broker.broker.api.offload import Offload


def _wait_until(condition, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def test_a_call_after_another_finished_runs_on_the_thread_it_left_idle() -> None:
    offload = Offload(limit=4)
    threads: list[threading.Thread] = []
    names: list[str] = []
    done = threading.Event()

    def call() -> None:
        threads.append(threading.current_thread())
        names.append(threading.current_thread().name)
        done.set()

    offload.start(call, "first-call")
    assert done.wait(5)
    assert _wait_until(lambda: offload.idle == 1 and offload.running == 0)
    done.clear()
    offload.start(call, "second-call")
    assert done.wait(5)
    assert threads[0] is threads[1]
    assert names == ["first-call", "second-call"]
    assert _wait_until(lambda: offload.idle == 1 and offload.running == 0)


def test_calls_running_at_once_each_have_a_thread_of_their_own() -> None:
    calls = 6
    offload = Offload(limit=calls)
    together = threading.Barrier(calls, timeout=10)
    idents: set[int] = set()
    finished = threading.Semaphore(0)

    def call() -> None:
        idents.add(threading.get_ident())
        together.wait()  # broken (and raising) unless every call runs at the same time
        finished.release()

    for _ in range(2):  # the second round reuses the first round's threads
        for number in range(calls):
            offload.start(call, f"call-{number}")
        for _ in range(calls):
            assert finished.acquire(timeout=10)
    assert len(idents) == calls
    assert _wait_until(lambda: offload.running == 0 and offload.idle == calls)


def test_a_call_past_the_limit_is_refused_while_the_others_run() -> None:
    offload = Offload(limit=1)
    release = threading.Event()
    offload.start(release.wait, "blocking")
    with pytest.raises(ResourceExhausted, match="limit 1"):
        offload.start(lambda: None, "one-too-many")
    release.set()
    assert _wait_until(lambda: offload.running == 0)
    offload.start(lambda: None, "after")  # the slot is free again


def test_a_thread_no_call_needed_for_its_idle_time_ends() -> None:
    offload = Offload(limit=2, idle_thread_s=0.05)
    seen: list[threading.Thread] = []
    offload.start(lambda: seen.append(threading.current_thread()), "short")
    assert _wait_until(lambda: bool(seen) and not seen[0].is_alive())
    assert offload.idle == 0 and offload.running == 0


def test_a_call_that_raises_leaves_its_thread_serving_the_next_one() -> None:
    offload = Offload(limit=1)
    ran = threading.Event()

    def failing() -> None:
        raise RuntimeError("a bug in a call")

    offload.start(failing, "failing")
    assert _wait_until(lambda: offload.running == 0 and offload.idle == 1)
    offload.start(ran.set, "next")
    assert ran.wait(5)


def test_every_call_runs_once_when_calls_meet_threads_whose_idle_time_runs_out() -> None:
    """Calls handed over just as idle threads give up waiting: none is lost or run twice."""
    offload = Offload(limit=64, idle_thread_s=0.001)
    runs: list[int] = []
    lock = threading.Lock()

    def call(number: int) -> None:
        with lock:
            runs.append(number)

    def starter(first: int) -> None:
        for number in range(first, first + 500):
            while True:
                try:
                    offload.start(lambda number=number: call(number), f"call-{number}")
                    break
                except ResourceExhausted:
                    time.sleep(0.001)
            if number % 7 == 0:
                time.sleep(0.002)  # let some threads time out between calls

    starters = [threading.Thread(target=starter, args=(n * 1000,)) for n in range(4)]
    for thread in starters:
        thread.start()
    for thread in starters:
        thread.join(60)
    assert _wait_until(lambda: offload.running == 0)
    assert sorted(runs) == [n * 1000 + i for n in range(4) for i in range(500)]
    assert _wait_until(lambda: offload.idle == 0)
