"""CPU slots of the reading phase (buildkit.image.speed.cpushare): the largest layer keeps a CPU while it streams, the
rest share the others first come, first served, and a slot is never taken out of turn."""

from __future__ import annotations

import threading
import time

from buildkit.image.speed.cpushare import CpuShare


def started(target) -> threading.Thread:  # type: ignore[no-untyped-def]
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def wait_until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(500):
        if check():
            return
        time.sleep(0.01)
    raise AssertionError(f"never: {what}")


def queued(share: CpuShare, count: int) -> None:
    """Until ``count`` threads wait in line for a slot: each has asked and not been given one (the event the
    assertions after it need; no sleep decides them)."""
    wait_until(lambda: len(share._waiting) == count, f"{count} waiting")  # noqa: SLF001


def test_two_cpus_leave_one_slot_until_the_largest_layer_is_in() -> None:
    share = CpuShare(2)
    share.acquire()
    got = threading.Event()
    second = started(lambda: (share.acquire(), got.set()))
    queued(share, 1)
    assert not got.is_set()  # it waits in line: the other CPU is the largest layer's
    share.unreserve()
    assert got.wait(5)
    second.join(5)
    share.unreserve()  # once only: a second call frees nothing more
    third = threading.Event()
    started(lambda: (share.acquire(), third.set()))
    queued(share, 1)
    assert not third.is_set()
    share.release()
    assert third.wait(5)


def test_slots_go_in_arrival_order_and_a_releaser_cannot_take_its_slot_back() -> None:
    share = CpuShare(2)  # one shared slot
    share.acquire()
    order: list[str] = []
    for queued, name in enumerate(("a", "b", "c"), 1):
        started(lambda name=name: (share.acquire(), order.append(name), share.release()))
        wait_until(lambda queued=queued: len(share._waiting) == queued, f"{name} waits")
    share.release()
    share.acquire()  # the releaser asks again at once: it queues behind a, b and c
    assert order == ["a", "b", "c"]
    share.release()


def test_one_cpu_is_not_reserved() -> None:
    share = CpuShare(1)
    with share.slot():
        pass
    share.unreserve()  # nothing reserved: nothing changes
    share.acquire()
    taken = threading.Event()
    started(lambda: (share.acquire(), taken.set()))
    queued(share, 1)
    assert not taken.is_set()
    share.release()
    assert taken.wait(5)
