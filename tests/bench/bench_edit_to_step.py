"""From an edit of the job's code to the first step of a 2-node job on the test Slurm (``python -m tests.bench
edit_to_step``).

The image is cached: busybox with an old copy of the code at ``/workspace/app``, built by podman and converted to
``.sqsh`` by ``ckit convert`` once, before anything is timed. Each trial is the user's loop, end to end: a line of
``app/main.sh`` changes, ``ckit launch --code app:/workspace/app --submit -N 2 -p multi`` runs (a process, Python's
start included), and the clock stops when the job's output file first shows a line the edited code printed (the
file is polled every 20 ms). Runtimes: Charliecloud's ``ch-run`` from the ``.sqsh`` and podman from its store.
Target: at most 5 s. Medians of 5; the launch command's own share is reported beside it (the rest is Slurm's:
scheduling, the step's start on both nodes, the container's start).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.bench import BenchResult, sh
from tests.infra import components

TRIALS = 5
CKIT = [sys.executable, "-m", "buildkit.cli"]
MAIN = 'echo "CODE {token} on $(hostname)"\n'
WAIT = 120  # seconds a job may take to print before the trial counts as failed


def _image(folder: Path) -> tuple[str, Path]:
    """The image's tag in podman and its ``.sqsh``, each holding an old copy of the code."""
    from buildkit.engine.base import BuildRequest
    from buildkit.engine.docker import DockerEngine
    from buildkit.render.context import ContextFile
    from tests.infra.images import BUSYBOX_REF as busybox
    tag = f"localhost/ckit-bench/edit-{uuid.uuid4().hex[:8]}:1"
    context = [ContextFile("Dockerfile", f"FROM {busybox}\nCOPY main.sh /workspace/app/main.sh\n".encode(), 0o644),
               ContextFile("main.sh", MAIN.format(token="image").encode(), 0o755)]
    DockerEngine().build(BuildRequest(context, "edit-image", tag), lambda event: None)
    sqsh = folder / "app.sqsh"
    sh(*CKIT, "convert", f"docker-daemon:{tag}", "--to", "sqsh", "-o", str(sqsh))
    return tag, sqsh


def _trial(submit: Path, code: Path, image: str, runtime: str, env: dict[str, str]) -> tuple[float, float]:
    """(seconds from the edit to the first line of the edited code, seconds of the launch command)."""
    token = uuid.uuid4().hex[:12]
    started = time.perf_counter()
    (code / "main.sh").write_text(MAIN.format(token=token))  # the edit
    argv = [*CKIT, "launch", "--json", "-J", "edit", "--site", "local", "-p", "multi", "-N", "2", "--runtime",
            runtime, "--image", image, "--code", f"{code}:/workspace/app", "--submit", "--", "sh",
            "${CKIT_CODE}/main.sh"]
    done = subprocess.run(argv, check=True, cwd=submit, env=env, capture_output=True, text=True)  # noqa: S603
    launched = time.perf_counter() - started
    log = submit / f"edit-{json.loads(done.stdout)['job_id']}.out"
    while time.perf_counter() - started < WAIT:
        if log.exists() and f"CODE {token} on " in log.read_text(errors="replace"):
            return time.perf_counter() - started, launched
        time.sleep(0.02)
    raise RuntimeError(f"{log}: no line of the edited code after {WAIT} s")


def run() -> list[BenchResult]:
    from tests.infra.containers import remove_images

    components.start(["podman", "busybox", "slurm", "charliecloud"])
    env = {**os.environ, **components.get("podman").env(), **components.get("slurm").env()}
    os.environ.update(env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed ckit runs: bytecode compiled once, by the first launch
    folder = Path(tempfile.mkdtemp(prefix="ckit-bench-edit-", dir="/tmp"))  # both nodes and ch-run's user read it
    folder.chmod(0o755)
    results: list[BenchResult] = []
    tag = ""
    try:
        tag, sqsh = _image(folder)
        for runtime, image in (("charliecloud", str(sqsh)), ("podman", tag)):
            submit = folder / runtime
            code = submit / "app"
            code.mkdir(parents=True)
            submit.chmod(0o755)
            run_env = {**env, "CKIT_CACHE_DIR": str(submit / "cache")}
            _trial(submit, code, image, runtime, run_env)  # the first launch packs the code folder whole
            trials = [_trial(submit, code, image, runtime, run_env) for _ in range(TRIALS)]
            total = statistics.median(t for t, _ in trials)
            launch = statistics.median(t for _, t in trials)
            results.append(BenchResult(
                f"edit -> first step of a 2-node job, cached image, {runtime}", total, "s", "<= 5",
                f"median of {TRIALS}; `ckit launch --code ... --submit` {launch:.2f} s of it, the rest Slurm's "
                f"and the container's start; range {min(t for t, _ in trials):.2f}-{max(t for t, _ in trials):.2f} s"))
    finally:
        if tag:
            import docker

            remove_images(docker.from_env(), [tag])
        shutil.rmtree(folder, ignore_errors=True)
    return results
