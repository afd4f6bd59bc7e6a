"""Registry references through ckit's importer with Pyxis 0.24.0 configured ``importer=`` and ``use_squashfuse=1``,
and a site profile that says so (``importer: ckit``, ``squashfuse: true``): ckit's jobs run unnamed, so Pyxis starts
every step straight from the file the importer printed ("using importer squashfs directly") and unpacks nothing.
Pyxis then skips the first of its two release calls: the file must stay valid until the one at task exit.

Counted, not timed (tests/bench/bench_ttfs.py times it): Pyxis's gets and releases (the wrapper writes each call
down), the conversions (the cache's artifacts), the unpacks (Pyxis's own log, ``creating container filesystem``)
and the holds left in the cache. A start is proven by the test image's ``report`` running in the container.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.image.squashfs.superblock import check
from buildkit.launch.slurmjobs import wait_for
from tests.integration.importer_jobs import (
    Importing,
    artifacts,
    calls,
    enroot_layers,
    holds,
    importing,
    served_from_cache,
)
from tests.integration.pyxis_jobs import ran_clean
from tests.integration.registry_helpers import ckit


@pytest.fixture(scope="module")
def setup(slurm, podman, debian_image, tmp_path_factory) -> Iterator[Importing]:  # type: ignore[no-untyped-def]
    with importing(slurm, debian_image, tmp_path_factory.mktemp("importer"), squashfuse=True) as ready:
        yield ready


def _srun(setup: Importing, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    ref = setup.work.ref.replace("/", "#", 1)
    return subprocess.run(["srun", "-p", "multi", f"--container-image={ref}", *args],  # noqa: S603, S607
                          env={**os.environ, **setup.cluster.env, "ENROOT_LOGIN_SHELL": "no"},  # as ckit's jobs
                          capture_output=True, text=True, timeout=300, check=False, **kw)  # type: ignore[call-overload]


def _job_id(done: subprocess.CompletedProcess[str]) -> str:
    """The job of an ``srun -v`` ("srun: jobid 123: nodes(1)…")."""
    found = re.search(r"^srun: jobid (\d+)", done.stderr, re.M)
    assert found, done.stderr
    return found[1]


def test_a_unnamed_step_starts_from_the_importers_file(setup: Importing) -> None:
    done = _srun(setup, "-w", "n2", "report")
    assert done.returncode == 0, done.stderr
    assert f"image={setup.work.name}" in done.stdout and setup.cluster.containers() == {"n1": [], "n2": []}


def test_ckit_jobs_convert_once_and_start_cached_without_unpacking(setup: Importing, tmp_path: Path) -> None:
    """Two nodes, one conversion (the cluster cache); the next job starts from the cached file on both nodes:
    no conversion, no unpack, no layer pulled by enroot, one get and one release per node and step, and no hold
    left once the job is over."""
    pulled = enroot_layers(setup.cluster)
    jobs = []
    for n, ref in enumerate((setup.work.ref, setup.work.pinned)):  # by tag, then by digest
        (tmp_path / f"job{n}").mkdir()
        jobs.append(ran_clean(setup.cluster, setup.work, tmp_path / f"job{n}", "--image", ref))
    (served,) = artifacts(setup)  # one conversion for the cluster
    assert check(served).compression == "lz4"  # the site says squashfuse: its .sqsh is lz4 (squashfs.SQUASHFUSE)
    for job in jobs:
        assert "--container-name" not in job.script and "# Pyxis start: straight from the .sqsh" in job.script
        log = setup.cluster.pyxis_log(job.job_id)
        assert sum("pyxis: using importer squashfs directly" in line for line in log) == 2, log
        assert setup.cluster.unpacked(job.job_id) == 0, log
        assert sorted(calls(setup, job.job_id)) == ["get n1", "get n2", "release n1", "release n2"]
    assert artifacts(setup) == [served] and enroot_layers(setup.cluster) == pulled and holds(setup) == []
    served_from_cache(setup, setup.work.ref)


def test_two_tasks_on_a_node_share_one_get(setup: Importing) -> None:
    done = _srun(setup, "-w", "n1", "-n", "2", "-v", "report")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("hello from ckit") == 2, done.stdout
    assert calls(setup, _job_id(done)) == ["get n1", "release n1"] and holds(setup) == []


def test_the_file_stays_until_release_even_through_a_prune(setup: Importing, tmp_path: Path) -> None:
    """A prune to size 0 while a step runs from the file evicts nothing (the step holds it); after the step's
    release the same prune evicts it."""
    started, go = tmp_path / "started", tmp_path / "go"
    tmp_path.chmod(0o777)
    step = subprocess.Popen(["srun", "-p", "multi", "-w", "n2",  # noqa: S603, S607
                             f"--container-image={setup.work.ref.replace('/', '#', 1)}",
                             f"--container-mounts={tmp_path}:{tmp_path}", "sh", "-c",
                             f"touch {started}; while [ ! -e {go} ]; do sleep 0.1; done; report"],
                            env={**os.environ, **setup.cluster.env, "ENROOT_LOGIN_SHELL": "no"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(started, step)
        (held,) = artifacts(setup)
        assert len(holds(setup)) == 1
        pruned = ckit("cache", "prune", "--max-size", "0", "--cache", str(setup.cache), "--json")
        assert pruned.returncode == 0 and json.loads(pruned.stdout)["evicted"] == [], pruned.stdout
        go.touch()
        out, err = step.communicate(timeout=300)
        assert step.returncode == 0 and "hello from ckit" in out, err
    finally:
        go.touch()
        if step.poll() is None:
            step.kill()
    assert holds(setup) == [] and held.exists()
    again = ckit("cache", "prune", "--max-size", "0", "--cache", str(setup.cache), "--json")
    assert [e["path"] for e in json.loads(again.stdout)["evicted"]] == [str(held)], again.stdout


def test_scancel_leaves_no_mount_and_no_hold(setup: Importing, tmp_path: Path) -> None:
    started = tmp_path / "started"
    tmp_path.chmod(0o777)
    batch = subprocess.run(["sbatch", "--parsable", "-p", "multi", "-w", "n1", "--wrap",  # noqa: S607
                            f"srun --container-image={setup.work.ref.replace('/', '#', 1)} "
                            f"--container-mounts={tmp_path}:{tmp_path} sh -c 'touch {started}; exec sleep 600'"],
                           env={**os.environ, **setup.cluster.env, "ENROOT_LOGIN_SHELL": "no"}, cwd=tmp_path,
                           capture_output=True, text=True, check=True)
    job = batch.stdout.strip().split(";")[0]
    _wait_for(started, None)
    (image,) = artifacts(setup)
    assert _squashfuse_of(image), "the step runs from a squashfuse mount of the cached file"
    subprocess.run(["scancel", job], env={**os.environ, **setup.cluster.env}, check=True)  # noqa: S607
    wait_for(job, poll=0.5)
    deadline_polls = 600  # the step's cleanup (release, the FUSE processes' exit) follows the job's end
    while (_squashfuse_of(image) or holds(setup)) and deadline_polls:
        time.sleep(0.1)
        deadline_polls -= 1
    assert not _squashfuse_of(image) and holds(setup) == []
    assert calls(setup, job)[-1] == "release n1"


def _squashfuse_of(image: Path) -> list[int]:
    """The squashfuse processes serving ``image`` (their command line names it)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"squashfuse") and str(image).encode() in argv:
            found.append(int(proc.name))
    return found


def _wait_for(path: Path, step: subprocess.Popen[str] | None) -> None:
    """Until ``path`` exists (the step's program wrote it), or the step ends, or 300 s pass."""
    for _ in range(3000):
        if path.exists():
            return
        if step is not None and step.poll() is not None:
            raise AssertionError(f"the step ended first: {step.communicate()}")
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")
