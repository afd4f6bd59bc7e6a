"""The test infrastructure around the real runtimes: munged adopted only when it is ours, and Debian's Apptainer
(tests/infra/apptainer.py) where the nodes' jobs find it, as root and as another user."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra import slurm as cluster
from tests.infra.daemon import is_alive, read_pid, stop_pid, wait_ready
from tests.testdata import sif_dir


@pytest.fixture
def other_munged() -> Iterator[tuple[int, Path]]:
    """A munged that is not the tests' own: its own socket and pid file (as a site's second munged would be)."""
    folder = Path(tempfile.mkdtemp(prefix="ckit-munge-"))
    munge = pwd.getpwnam("munge")
    os.chown(folder, munge.pw_uid, munge.pw_gid)
    folder.chmod(0o755)
    subprocess.run(["runuser", "-u", "munge", "--", "munged", f"--socket={folder}/socket",  # noqa: S607
                    f"--pid-file={folder}/pid", f"--log-file={folder}/log", f"--seed-file={folder}/seed"],
                   check=True, timeout=30)
    wait_ready("the other munged", lambda: read_pid(folder / "pid") is not None, log=folder / "log")
    pid = read_pid(folder / "pid")
    assert pid is not None
    try:
        yield pid, folder / "socket"
    finally:
        stop_pid(pid, what="the other munged")
        shutil.rmtree(folder, ignore_errors=True)


def test_a_munged_that_is_not_ours_is_never_adopted_or_stopped(slurm, other_munged, tmp_path,  # type: ignore[no-untyped-def]
                                                               monkeypatch) -> None:
    """Before: with its pid file gone, any process named munged was taken for ours, and stop.sh stopped it."""
    pid, socket = other_munged
    ours = slurm_munge_pid()
    monkeypatch.setattr(cluster, "MUNGE_PIDFILE", tmp_path / "gone.pid")
    assert cluster.Munge().pid() == ours  # found by the socket it holds, not by its name
    monkeypatch.setattr(cluster, "MUNGE_SOCKET", tmp_path / "nobody.socket")
    munge = cluster.Munge()
    assert munge.pid() is None and not munge.running()
    munge._stop()  # what stop.sh does when it finds nothing of ours
    assert is_alive(pid) and is_alive(ours)
    assert not (tmp_path / "gone.pid").exists()
    monkeypatch.setattr(cluster, "MUNGE_SOCKET", socket)
    assert cluster.Munge().pid() == pid


def slurm_munge_pid() -> int:
    pid = read_pid(cluster.MUNGE_PIDFILE)
    assert pid is not None and is_alive(pid)
    return pid


def test_the_nodes_run_apptainer_from_their_path(slurm, apptainer, charliecloud) -> None:  # type: ignore[no-untyped-def]
    """On each node a job's own shell finds ``apptainer`` and ``singularity`` (installed, as on a site) and runs a
    reference .sif in the node's own namespaces, as root and as an unprivileged user; the root's own binaries run,
    never the wrapper again (a job's PATH names the wrapper's folder, which is bound into the root too)."""
    sif = sif_dir() / "busybox_amd64.sif"
    line = f'echo "$(hostname) $(command -v singularity)"; singularity exec {sif} hostname; apptainer --version'
    for user in ("root", charliecloud.user.pw_name):
        done = subprocess.run(["runuser", "-u", user, "--", "srun", "-p", "multi", "-N", "2",  # noqa: S607
                               "--ntasks-per-node=1", "sh", "-c", line],
                              env={**os.environ, **slurm.env, "PATH": f"{apptainer.bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"},
                              capture_output=True, text=True, timeout=120, check=False, cwd="/tmp")
        assert done.returncode == 0, done.stderr
        for node in ("n1", "n2"):
            assert f"{node} {apptainer.bin_dir}/singularity" in done.stdout
            assert done.stdout.count(f"\n{node}\n") + done.stdout.startswith(f"{node}\n") == 1, done.stdout
        assert done.stdout.count("apptainer version 1.4.5") == 2
