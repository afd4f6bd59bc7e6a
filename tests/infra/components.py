"""Start, stop and describe the real components tests, CI and ``make demo`` use.

    python -m tests.infra.components start [NAME ...]   # all when no NAME; reuses healthy ones
    python -m tests.infra.components stop [--force] [NAME ...]   # --force: even if a test session uses it
    python -m tests.infra.components env                # `export K=V` lines for a shell

Everything lives under the run dir (``CKIT_RUN_DIR``, default ``<repo>/.run``); RUN/env.sh holds the client
variables. Components: podman, busybox, debian (base images), registry (127.0.0.1:5000), registry-auth (:5001,
htpasswd), registry-tls (:5002, test CA), munge, slurm, frameworks (a venv with torch, mpi4py, tensorflow-cpu,
ray for --runtime none jobs), framework-wheels (their wheels, for the test image), horovod (Horovod with Gloo
built against Debian's torch), charliecloud (ch-run's unprivileged user, /dev/fuse), apptainer (Debian unstable's
Apptainer 1.4.5 in a root of its own, as ``apptainer`` and ``singularity`` and under the sites' module names).
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from .apptainer import Apptainer
from .charliecloud import Charliecloud
from .daemon import Component, ComponentError, run_dir
from .frameworks import FrameworkVenv, FrameworkWheels, HorovodVenv
from .images import BusyboxImage, DebianImage
from .podman import PodmanService
from .registry import AuthRegistry, Registry, TLSRegistry
from .slurm import Munge, Slurm

COMPONENTS: dict[str, type[Component]] = {
    cls.name: cls
    for cls in (
        PodmanService,
        BusyboxImage,
        DebianImage,
        Registry,
        AuthRegistry,
        TLSRegistry,
        Munge,
        Slurm,
        FrameworkVenv,
        FrameworkWheels,
        HorovodVenv,
        Charliecloud,
        Apptainer,
    )
}


def get(name: str, run: Path | None = None) -> Component:
    try:
        return COMPONENTS[name](run)
    except KeyError:
        raise ComponentError(f"unknown component {name!r}; known: {', '.join(COMPONENTS)}") from None


def with_requirements(names: Iterable[str]) -> list[str]:
    """``names`` plus what they need, in start order."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in get(name).requires:
            visit(dep)
        order.append(name)

    for name in names:
        visit(name)
    return order


def environment(run: Path | None = None) -> dict[str, str]:
    """The client variables of every component (static: they do not depend on what runs)."""
    env = {"CKIT_RUN_DIR": str(run or run_dir())}
    for name in COMPONENTS:
        env.update(get(name, run).env())
    return env


def write_env_file(run: Path | None = None) -> Path:
    run = run or run_dir()
    path = run / "env.sh"
    lines = [f"export {key}={shlex.quote(value)}" for key, value in environment(run).items()]
    path.write_text(
        "# source this file: the client variables of the ckit test components\n" + "\n".join(lines) + "\n"
    )
    return path


def start(names: Iterable[str] = (), *, keep: bool = True) -> dict[str, float | None]:
    """Start ``names`` (all when empty) and what they need; returns seconds per component (None: reused).

    ``keep``: test sessions leave them running at their end (until ``stop``).
    """
    write_env_file()
    timings: dict[str, float | None] = {}
    for name in with_requirements(list(names) or list(COMPONENTS)):
        component = get(name)
        timings[name] = component.start_seconds if component.start() else None
        if keep:
            component.keep()
    return timings


def stop(names: Iterable[str] = (), *, force: bool = False) -> dict[str, list[int]]:
    """Stop just ``names`` (all when empty), dependents first; returns, per component left running, the pids of
    the live sessions still using it (``force`` stops it anyway)."""
    wanted = set(names) or set(COMPONENTS)
    for name in wanted:
        get(name)  # unknown names fail before anything stops
    busy: dict[str, list[int]] = {}
    for name in reversed([n for n in with_requirements(COMPONENTS) if n in wanted]):
        users = get(name).stop(force=force)
        if users:
            busy[name] = users
    return busy


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("start", "stop", "env"):
        print(__doc__, file=sys.stderr)
        return 2
    command, names = argv[0], argv[1:]
    try:
        if command == "env":
            print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in environment().items()))
        elif command == "start":
            begin = time.monotonic()
            for name, seconds in start(names).items():
                state = "already running" if seconds is None else f"started in {seconds:.2f} s"
                print(f"{name}: {state}", file=sys.stderr)
            print(f"all up in {time.monotonic() - begin:.2f} s; env: {run_dir() / 'env.sh'}", file=sys.stderr)
        else:
            force = "--force" in names
            for name, users in stop([n for n in names if n != "--force"], force=force).items():
                pids = " ".join(map(str, users))
                print(
                    f"{name}: left running, still used by pid {pids} (stop --force stops it anyway)",
                    file=sys.stderr,
                )
    except ComponentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
