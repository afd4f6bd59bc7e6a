"""Rebuild after a one-line code change, against a fully cached build (``python -m tests.bench rebuild``).

The recipe is the README's first one ("Your first recipe": hello, python, pip, and the user's code as
``files as code``), written as the README prints it, built with ``--set debian.registry=localhost/ckit-bench``: on
the local ``localhost/debian:bookworm`` like the demo stack, plus this machine's CA bundle and ``PIP_CERT``, so that
pip in the image gets through the TLS-inspecting proxy (``localhost/ckit-bench/debian:bookworm``, made by the
engine; apt and pip need the network the first time, the engine's cache after that).

Both are timed as the user runs them, the whole ``ckit build`` command: a cached build is one whose build key the
engine has (nothing to build), a rebuild is one after a line was appended to ``app/main.py`` (a new key: the
engine runs the steps the change invalidates). Python's bytecode is written and used, as in an installed ckit.
Each is measured for the image alone and for ``--to image,sif,sqsh`` (a cached build then also finds both files
in the store; a rebuild converts again, from the previous build's converted layers). Target: the rebuild takes at most 3× the cached build, each way (median of 5 pairs); the steps
the engine ran are counted from its log (``STEP n/N`` without ``--> Using cache``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from buildkit import process
from tests.bench import BenchResult
from tests.infra import components

REPO = Path(__file__).resolve().parents[2]
CKIT = [sys.executable, "-m", "buildkit.cli"]
TRIALS = 5
WAYS = (("image only", ()), ("--to image,sif,sqsh", ("--to", "image,sif,sqsh")))
BASE = "localhost/ckit-bench/debian:bookworm"
TAG = "localhost/ckit-bench/myapp:rebuild"  # kept: the next run finds the apt and pip steps in the engine's cache


def _base_with_the_ca() -> None:
    from buildkit.engine.base import BuildRequest
    from buildkit.engine.docker import DockerEngine
    from buildkit.render.context import ContextFile

    ca = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt").read_bytes()
    dockerfile = (b"FROM localhost/debian:bookworm\nCOPY site-ca.crt /etc/ssl/certs/site-ca.crt\n"
                  b"ENV PIP_CERT=/etc/ssl/certs/site-ca.crt\n")
    context = [ContextFile("Dockerfile", dockerfile, 0o644), ContextFile("site-ca.crt", ca, 0o644)]
    DockerEngine().build(BuildRequest(context, "bench-base", BASE), lambda event: None)


def _build(project: Path, env: dict[str, str], to: tuple[str, ...] = ()) -> tuple[float, dict, list[tuple[str, bool]]]:
    """Seconds, the --json summary, and the engine's steps (instruction, whether it ran)."""
    argv = [*CKIT, "--recipes", str(project), "build", "myapp", "--set", "debian.registry=localhost/ckit-bench",
            "--tag", TAG, "--json", "-o", str(project / "out"), *to]
    started = time.monotonic()
    done = process.run(argv, env=env, cwd=REPO, step="ckit build myapp")
    seconds = time.monotonic() - started
    steps: list[tuple[str, bool]] = []
    for line in done.stderr.splitlines():
        if line.startswith("STEP "):
            steps.append((line.split(": ", 1)[-1], not line.split(": ", 1)[-1].startswith("FROM ")))
        elif line.startswith("--> Using cache") and steps:
            steps[-1] = (steps[-1][0], False)
    return seconds, json.loads(done.stdout), steps


def run() -> list[BenchResult]:
    import docker

    from tests.infra.containers import remove_replaced
    from tests.unit.test_first_hour_rules import write_readme_project

    components.start(["podman", "debian"])
    env = {**components.get("podman").env(), "COLUMNS": "400"}
    os.environ.update(env)
    _base_with_the_ca()
    results: list[BenchResult] = []
    with tempfile.TemporaryDirectory(prefix="ckit-bench-rebuild-") as tmp:
        env = {**os.environ, **env, "CKIT_CACHE_DIR": str(Path(tmp) / "cache")}
        # as an installed ckit runs: its modules' bytecode compiled once (the first build writes it), not compiled
        # again by every command (about 0.16 s of each, which would hide most of what a cached build costs)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        project = write_readme_project(Path(tmp))
        first, _, _ = _build(project, env)  # the engine has the recipe's layers now (from a cache, or built)
        made: list[str] = []
        for way, to in WAYS:
            results += _pairs(project, env, way, to, made)
        # each rebuild left the image before it without a name (its code is this run's own: removed by ID)
        remove_replaced(docker.from_env(), made[:-1])
    results[0] = replace(results[0], detail=results[0].detail + f"; first build of the run {first:.1f} s")
    return results


def _pairs(project: Path, env: dict[str, str], way: str, to: tuple[str, ...], made: list[str]) -> list[BenchResult]:
    """TRIALS pairs of a cached build and a rebuild after a one-line edit, made ``to`` (in pairs, so that both
    see the same load on a shared machine)."""
    cached, rebuilt = [], []
    for n in range(TRIALS):
        _build(project, env, to)  # what the last edit left to make (the files, after an image-only rebuild)
        cached.append(_build(project, env, to))
        main = project / "app/main.py"
        main.write_text(main.read_text() + f"print({n}, {time.time_ns()})\n")  # one line, new to the engine
        rebuilt.append(_build(project, env, to))
        made.append(rebuilt[-1][1]["artifacts"][0]["digest"])
    assert all(a["cache_hit"] for _, summary, _ in cached for a in summary["artifacts"]), "a cached build built"
    assert not any(a["cache_hit"] for _, summary, _ in rebuilt for a in summary["artifacts"]), "a rebuild hit"
    hit, again = statistics.median(s for s, _, _ in cached), statistics.median(s for s, _, _ in rebuilt)
    ratio = statistics.median(r[0] / c[0] for r, c in zip(rebuilt, cached, strict=True))
    steps = rebuilt[-1][2]
    ran = [text.split()[0] for text, ran in steps if ran]
    files = [f"{a['kind']} {statistics.median(s[1]['artifacts'][i]['seconds'] for s in rebuilt):.2f} s"
             for i, a in enumerate(rebuilt[-1][1]["artifacts"])]
    detail = (f"median of {TRIALS} pairs; rebuild {again:.2f} s, cached {hit:.2f} s (medians); the engine ran "
              f"{len(ran)} of {len(steps)} steps ({' '.join(ran)}); per artifact (medians): {', '.join(files)}")
    return [
        BenchResult(f"rebuild after a one-line code change / cached build, {way}", ratio, "x", "<= 3", detail),
        BenchResult(f"rebuild after a one-line code change (README recipe), {way}", again, "s", "",
                    "whole `ckit build` command, Python start included"),
    ] + ([BenchResult("steps the engine ran in that rebuild", len(ran), "", "", " ".join(ran))] if not to else [])
