"""Leases (buildkit.storage.lease): link-based, heartbeat by progress, stale takeover without flock, safe under races."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from buildkit.errors import ConvertError
from buildkit.storage import lease as lease_mod
from buildkit.storage.lease import HOST, NAMESPACE, Lease, Owner, clear_if_gone, process_start, read_owner
from buildkit.storage.store import Store, make_key


def foreign(path: Path, *, host: str = "other-node", pid: int = 4242, token: str = "e" * 32,
            start: str | None = "1", namespace: str | None = None) -> Owner:
    """A lease file written by a holder elsewhere (as another node's importer would leave it); a holder on this
    host is in this boot and PID namespace unless ``namespace`` says otherwise."""
    space = namespace if namespace is not None else NAMESPACE if host == HOST else "other-boot/pid:[1]"
    owner = Owner(token, host, pid, start, "77.0@other-node", time.time(), space)
    own = path.with_name(f"{path.name}.{token}")
    own.write_bytes(owner.encode())
    os.link(own, path)
    return owner


def test_one_holder_at_a_time_and_release_frees_the_name(tmp_path: Path) -> None:
    first, second = Lease(tmp_path / "k.lease"), Lease(tmp_path / "k.lease")
    assert first.try_acquire()
    assert not second.try_acquire()
    seen = read_owner(tmp_path / "k.lease")
    assert seen is not None and seen[1] == first.owner and seen[1].host == HOST and seen[1].pid == os.getpid()
    first.release()
    assert second.try_acquire()
    second.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no lock and no owner files left behind


def test_a_holder_whose_process_is_gone_is_taken_over_at_once(tmp_path: Path) -> None:
    path = tmp_path / "k.lease"
    dead = foreign(path, host=HOST, pid=2**22 + 12345)  # beyond pid_max: no such process on this host
    began = time.monotonic()
    with Lease(path, stale=60) as taker:
        assert time.monotonic() - began < 5
        assert read_owner(path)[1] == taker.owner  # type: ignore[index]
    assert not path.with_name(f"{path.name}.{dead.token}").exists()  # the dead holder's own file went too


def test_a_holder_without_progress_is_taken_over_after_stale_seconds(tmp_path: Path) -> None:
    path = tmp_path / "k.lease"
    foreign(path)  # another node: alive as far as this host can tell, but its lease never changes
    began = time.monotonic()
    with Lease(path, stale=0.6):
        waited = time.monotonic() - began
    assert 0.6 <= waited < 5


def test_a_holder_that_beats_is_not_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "k.lease"
    owner = foreign(path)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.1):
            os.utime(path.with_name(f"{path.name}.{owner.token}"))

    beater = threading.Thread(target=beat)
    beater.start()
    try:
        with pytest.raises(ConvertError, match="gave up waiting for uid 0, pid 4242 on other-node"):
            Lease(path, stale=0.5).acquire(timeout=2.0)
    finally:
        stop.set()
        beater.join()
    assert read_owner(path)[1] == owner  # type: ignore[index]


def test_heartbeat_counts_progress_not_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder that reads nothing and reports nothing stops beating (a spinning converter goes stale)."""
    monkeypatch.setattr(lease_mod, "BEAT_EVERY", 0.05)
    reads = iter(range(0, 10**9, 1000))
    monkeypatch.setattr(lease_mod, "_rchar", lambda: 0)  # no bytes read at all
    held = Lease(tmp_path / "k.lease", stale=5)
    assert held.try_acquire()
    before = os.stat(tmp_path / "k.lease").st_mtime_ns
    time.sleep(0.4)
    assert os.stat(tmp_path / "k.lease").st_mtime_ns == before  # stuck: no beat
    monkeypatch.setattr(lease_mod, "_rchar", lambda: next(reads))  # reading again: beats resume
    time.sleep(0.4)
    assert os.stat(tmp_path / "k.lease").st_mtime_ns > before
    held.release()


def test_a_holder_notices_it_lost_the_lease_and_the_store_does_not_publish(tmp_path: Path) -> None:
    store = Store(tmp_path)
    key = make_key(source_digest="sha256:a", target="sqsh")
    with store.lock(key) as held:
        lock = store.locks / f"{key}.lease"
        lock.unlink()
        foreign(lock)  # a waiter judged us stale and took over
        held.beat()
        assert held.lost
        temp = store.temp_path(key, "sqsh")
        temp.write_bytes(b"GOOD")
        with pytest.raises(ConvertError, match="took over the lease"):
            store.publish(key, "sqsh", temp, {"target": "sqsh"}, lambda p: None)
    assert not store.path(key, "sqsh").exists()
    assert read_owner(lock)[1] is not None and read_owner(lock)[1].host == "other-node"  # type: ignore[index]


def test_breaking_a_lease_renewed_meanwhile_puts_it_back(tmp_path: Path) -> None:
    """The waiter judged lease A stale, but by the time it renames the name it is lease B: B is restored."""
    path = tmp_path / "k.lease"
    old = foreign(path, token="a" * 32)
    st_old = os.stat(path)
    path.unlink()
    new = foreign(path, token="b" * 32)
    Lease(path)._break(st_old, old)
    assert read_owner(path)[1] == new  # type: ignore[index]


def test_clear_if_gone_only_clears_dead_holders_of_this_host(tmp_path: Path) -> None:
    alive = tmp_path / "alive.lease"
    foreign(alive, host=HOST, pid=os.getpid(), start=process_start(os.getpid()))
    assert not clear_if_gone(alive)
    reused = tmp_path / "reused.lease"  # our pid, but another start time: the holder was an earlier process
    foreign(reused, host=HOST, pid=os.getpid(), start="1")
    assert clear_if_gone(reused)
    remote = tmp_path / "remote.lease"
    foreign(remote)
    assert not clear_if_gone(remote)
    dead = tmp_path / "dead.lease"
    foreign(dead, host=HOST, pid=2**22 + 7)
    assert not clear_if_gone(dead, holder="someone-else")
    assert clear_if_gone(dead, holder="77.0@other-node") and not dead.exists()


def test_garbage_in_a_lease_file_is_a_holder_that_never_beats(tmp_path: Path) -> None:
    path = tmp_path / "k.lease"
    path.write_text(json.dumps({"not": "an owner"}))
    with Lease(path, stale=0.3):
        pass
    assert not path.exists()


def test_a_link_that_worked_but_reported_eexist_is_a_taken_lease(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """NFS: the reply to link() was lost, the client retransmitted, the server said EEXIST to the retry."""
    real_link = os.link

    def lost_reply(src: Path, dst: Path) -> None:
        real_link(src, dst)
        raise FileExistsError(17, "File exists")

    monkeypatch.setattr(lease_mod.os, "link", lost_reply)
    held = Lease(tmp_path / "k.lease")
    assert held.try_acquire()
    monkeypatch.setattr(lease_mod.os, "link", real_link)
    assert not Lease(tmp_path / "k.lease").try_acquire()
    held.release()
    assert not (tmp_path / "k.lease").exists()


def test_a_holder_in_another_pid_namespace_is_never_judged_gone(tmp_path: Path) -> None:
    """Two nodes of one name, each in its own PID namespace: a pid of the other's means nothing here, so only a
    lack of progress frees its lease."""
    path = tmp_path / "k.lease"
    owner = foreign(path, host=HOST, pid=2**22 + 99, namespace="another-boot/pid:[4026532000]")
    assert not owner.gone() and not clear_if_gone(path)
    with Lease(path, stale=0.5) as taker:  # taken over for its silence, not for its pid
        assert read_owner(path)[1] == taker.owner  # type: ignore[index]


def test_a_record_that_is_not_ckits_has_no_owner(tmp_path: Path) -> None:
    for raw in ({"token": "../../x", "host": "h", "pid": 1}, {"token": "a" * 32, "host": "h", "pid": -1},
                {"token": "a" * 32, "host": "h", "pid": 10**400}, ["not", "a", "mapping"]):
        assert Owner.parse(json.dumps(raw).encode()) is None


def test_a_fifo_or_folder_in_place_of_the_lease_is_an_error_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "k.lease")
    seen = read_owner(tmp_path / "k.lease")  # a non-blocking open: no writer needed
    assert seen is not None and seen[1] is None
    with pytest.raises(ConvertError, match="is not a lease file but a FIFO"):
        Lease(tmp_path / "k.lease").acquire(timeout=5)
    assert list(tmp_path.iterdir()) == [tmp_path / "k.lease"]  # its own record went with the error


def test_every_wait_has_an_overall_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "k.lease"
    owner = foreign(path)
    monkeypatch.setenv("CKIT_LOCK_WAIT_SECONDS", "1")
    stop = threading.Event()
    beater = threading.Thread(target=lambda: [os.utime(path) for _ in iter(lambda: stop.wait(0.1), True)])
    beater.start()
    try:
        with pytest.raises(ConvertError, match="gave up waiting for uid 0, pid 4242 on other-node") as err:
            Lease(path, stale=60).acquire()
        assert "CKIT_LOCK_WAIT_SECONDS" in str(err.value.hint)
    finally:
        stop.set()
        beater.join()
    assert read_owner(path)[1] == owner  # type: ignore[index]
