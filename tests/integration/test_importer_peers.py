"""Concurrent gets of one image on one node (buildkit.cache.peers): the first leaves a marker, the others lower
their CPU priority; the marker is a hint that never follows a symlink, is never seen half written, and is replaced
when its process is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from buildkit.cache import peers

URI = "docker://registry.example#team/image:1"


def env_for(tmp_path: Path) -> dict[str, str]:
    return {"TMPDIR": str(tmp_path)}


def claim_in_child(tmp_path: Path) -> tuple[str, int]:
    """What ``claim`` returns in another process, and that process's nice value afterwards."""
    code = ("import os, sys; from buildkit.cache import peers; "
            f"got = peers.claim({URI!r}, {{'TMPDIR': sys.argv[1]}}); print(got, os.nice(0))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    got, nice = out.stdout.split()
    return got, int(nice)


def test_the_first_get_leaves_a_marker_and_removes_it(tmp_path: Path) -> None:
    path = peers.claim(URI, env_for(tmp_path))
    assert path == peers.marker_path(URI, env_for(tmp_path))
    assert Path(path).read_text().split()[0] == str(os.getpid())
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(path).name]  # its own name was only a step
    peers.drop(path)
    assert list(tmp_path.iterdir()) == []


def test_a_get_that_finds_a_live_marker_steps_aside(tmp_path: Path) -> None:
    path = peers.claim(URI, env_for(tmp_path))
    try:
        got, nice = claim_in_child(tmp_path)
        assert (got, nice) == ("None", 19)
        assert Path(path).read_text().split()[0] == str(os.getpid())  # the first one's marker stays
    finally:
        peers.drop(path)


def test_a_marker_of_a_process_that_is_gone_is_replaced(tmp_path: Path) -> None:
    marker = Path(peers.marker_path(URI, env_for(tmp_path)))
    marker.write_text(f"{2**22 + 12345} 1\n")  # beyond pid_max: no such process
    got, nice = claim_in_child(tmp_path)
    assert (got, nice) == (str(marker), 0)
    with_reused_pid = f"{os.getpid()} 1\n"  # a live pid with another start time: a reused pid, not the maker
    marker.write_text(with_reused_pid)
    got, nice = claim_in_child(tmp_path)
    assert (got, nice) == (str(marker), 0)


def test_a_symlink_in_place_of_the_marker_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    marker = Path(peers.marker_path(URI, env_for(tmp_path)))
    marker.symlink_to(victim)
    got, nice = claim_in_child(tmp_path)
    assert nice == 0  # a symlink is no live marker
    assert victim.read_text() == "keep\n"
    peers.drop(got if got != "None" else None)


def test_drop_leaves_another_process_marker_alone(tmp_path: Path) -> None:
    marker = Path(peers.marker_path(URI, env_for(tmp_path)))
    marker.write_text("1 1\n")  # pid 1's, as far as this process can tell
    peers.drop(str(marker))
    assert marker.exists()
    peers.drop(None)  # nothing claimed: nothing to do
