"""Concurrent gets of one image on one node (buildkit.importer.peers): the first leaves a locked marker; a get of the
same user with the same settings waits for it and takes what it served; any other lowers its CPU priority and
takes the ordinary path. The marker never follows a symlink, is never seen half written, and is replaced when its
process is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from buildkit.importer import peers

URI = "docker://registry.example#team/image:1"


def env_for(tmp_path: Path, job: int = 1, **more: str) -> dict[str, str]:
    return {"TMPDIR": str(tmp_path), "SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "0", **more}


CHILD = """
import json, os, sys
from buildkit.importer import peers
env = json.loads(sys.argv[1])
got = peers.claim(sys.argv[2], env)
print("claimed", type(got).__name__, flush=True)
shared = peers.wait(got, float(sys.argv[3])) if isinstance(got, peers.Peer) else None
print(type(got).__name__, os.nice(0), shared.path if shared else "-", flush=True)
peers.drop(got)
"""


def child(env: dict[str, str], uri: str = URI, limit: float = 30.0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(env), uri, str(limit)], text=True,
                            stdout=subprocess.PIPE)


def claimed(proc: subprocess.Popen[str]) -> str:
    """Until the child has claimed (what it got): from then on a Peer waits for the marker's holder."""
    assert proc.stdout is not None
    word, kind = proc.stdout.readline().split()
    assert word == "claimed"
    return kind


def outcome(proc: subprocess.Popen[str]) -> tuple[str, int, str]:
    out, _ = proc.communicate(timeout=60)
    kind, nice, path = out.strip().split("\n")[-1].split()
    return kind, int(nice), path


def test_the_first_get_leaves_a_locked_marker_and_removes_it(tmp_path: Path) -> None:
    marker = peers.claim(URI, env_for(tmp_path))
    assert isinstance(marker, peers.Marker)
    assert marker.path == peers.marker_path(URI, env_for(tmp_path))
    lines = Path(marker.path).read_text().split("\n")
    assert lines[0].split()[0] == str(os.getpid()) and lines[2] == URI
    folder = Path(marker.path).parent
    assert folder == tmp_path / f"ckit-{os.geteuid()}" and folder.stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in folder.iterdir()) == [Path(marker.path).name]  # its own name was only a step
    peers.drop(marker)
    assert list(folder.iterdir()) == []


def test_a_get_of_the_same_user_and_settings_waits_and_takes_what_was_served(tmp_path: Path) -> None:
    marker = peers.claim(URI, env_for(tmp_path, job=1))
    assert isinstance(marker, peers.Marker)
    served = tmp_path / "artifact.sqsh"
    served.write_bytes(b"squashfs")
    waiter = child(env_for(tmp_path, job=2))  # another step: only its holder variables differ
    assert claimed(waiter) == "Peer"
    assert waiter.poll() is None  # still waiting for the first one (which holds the marker until it drops it)
    peers.publish(marker, str(tmp_path), "a" * 64, str(served))
    peers.drop(marker)
    assert outcome(waiter) == ("Peer", 19, str(served))


def test_a_peer_that_fails_or_is_killed_sends_its_waiters_down_the_ordinary_path(tmp_path: Path) -> None:
    marker = peers.claim(URI, env_for(tmp_path, job=1))
    waiter = child(env_for(tmp_path, job=2))
    assert claimed(waiter) == "Peer"
    peers.drop(marker)  # done without a result: it failed, or served offline
    assert outcome(waiter) == ("Peer", 19, "-")
    code = ("import json, sys, time; from buildkit.importer import peers; "  # a first get that is then killed
            "m = peers.claim(sys.argv[2], json.loads(sys.argv[1])); print(type(m).__name__, flush=True); "
            "time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, json.dumps(env_for(tmp_path, job=4)), URI], text=True,
                              stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "Marker"
    waiter = child(env_for(tmp_path, job=5))
    assert claimed(waiter) == "Peer"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert outcome(waiter) == ("Peer", 19, "-")  # its lock ended with it: no wait for the time limit


def test_other_settings_or_another_user_only_step_aside(tmp_path: Path) -> None:
    marker = peers.claim(URI, env_for(tmp_path, job=1))
    assert isinstance(marker, peers.Marker)
    try:
        assert outcome(child(env_for(tmp_path, job=2, ENROOT_CONFIG_PATH="/elsewhere"))) == ("NoneType", 19, "-")
        os.chown(marker.path, 65534, 65534)  # as if another user's
        assert outcome(child(env_for(tmp_path, job=3))) == ("NoneType", 19, "-")
    finally:
        peers.drop(marker)


def test_a_waiter_gives_up_at_its_time_limit(tmp_path: Path) -> None:
    marker = peers.claim(URI, env_for(tmp_path, job=1))
    try:
        assert outcome(child(env_for(tmp_path, job=2), limit=0.3)) == ("Peer", 19, "-")
    finally:
        peers.drop(marker)


def test_a_marker_of_a_process_that_is_gone_is_replaced(tmp_path: Path) -> None:
    marker = Path(str(peers.marker_path(URI, env_for(tmp_path))))
    marker.write_text(f"{2**22 + 12345} 1\n")  # beyond pid_max: no such process
    assert outcome(child(env_for(tmp_path)))[:2] == ("Marker", 0)
    marker.write_text(f"{os.getpid()} 1\n")  # a live pid with another start time: a reused pid, not the maker
    assert outcome(child(env_for(tmp_path)))[:2] == ("Marker", 0)


def test_a_private_folder_another_user_made_is_never_used(tmp_path: Path) -> None:
    """A co-tenant who made the folder (or a link by its name) before this user could plant, lock or read markers
    there: this user's get leaves none, waits for none and keeps its priority."""
    folder = tmp_path / f"ckit-{os.geteuid()}"
    folder.mkdir(mode=0o777)
    os.chown(folder, 65534, 65534)
    assert peers.marker_path(URI, env_for(tmp_path)) is None
    assert outcome(child(env_for(tmp_path))) == ("NoneType", 0, "-")
    folder.rmdir()
    folder.symlink_to(tmp_path)
    assert outcome(child(env_for(tmp_path))) == ("NoneType", 0, "-")


def test_a_symlink_in_place_of_the_marker_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    marker = Path(str(peers.marker_path(URI, env_for(tmp_path))))
    marker.symlink_to(victim)
    kind, nice, _ = outcome(child(env_for(tmp_path)))
    assert nice == 0  # a symlink is no live marker
    assert victim.read_text() == "keep\n"


def test_drop_leaves_a_marker_that_is_no_longer_its_own_alone(tmp_path: Path) -> None:
    marker = peers.claim(URI, env_for(tmp_path))
    assert isinstance(marker, peers.Marker)
    os.unlink(marker.path)
    Path(marker.path).write_text("1 1\n")  # another process's now
    peers.drop(marker)
    assert Path(marker.path).read_text() == "1 1\n"
    peers.drop(None)  # nothing claimed: nothing to do
