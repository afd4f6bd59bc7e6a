"""Pyxis 0.24.0 and enroot 4.1.2 in the test Slurm (installed under /opt/ckit-runtimes by tests/infra/install.sh).

- Every slurmd has enroot on its PATH (Pyxis runs ``enroot`` from slurmstepd's PATH) and runs in a mount namespace
  of its own, where the node's enroot.conf (``RUN/slurm/nodes/NODE/enroot.conf``) is bind-mounted over enroot's
  own file: Pyxis drops ``ENROOT_*_PATH`` and ``ENROOT_ALLOW_HTTP`` from the job's environment, so enroot's
  configuration file is the only place for them. There enroot's commands are also in /usr/local/bin (an overlay
  of links on the host's folder), as a package installs them on a real node: a job's own shell finds ``enroot``
  too, also the login environment Slurm gives a ``sbatch --export=NONE`` job. The host itself is left as it is. Each node keeps its containers, layers and runtime files in
  ``RUN/enroot/NODE`` (as a real node keeps them on local disk: two nodes sharing one folder would create the
  same ``pyxis_NAME`` at once), and pulls from the plain-http test registry (``ENROOT_ALLOW_HTTP``).
- ``plugstack.conf`` sits next to slurm.conf (Slurm's default ``PlugStackConfig``); srun and every slurmstepd
  read it when they start, so a test module switches Pyxis's options (``use_squashfuse``, ``importer``) for the
  steps it submits by rewriting it (:func:`configured`, one module at a time), without restarting Slurm.
  ``container_scope=global`` as on the oci site (OC-A's plugstack.conf): a named container outlives its job.
- Pyxis's ``runtime_path`` is node-local (under the nodes' private TmpFS): Pyxis writes ``JOB.STEP.squashfs``
  there when enroot imports an image, the same name on every node of the step.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .daemon import ComponentError

PREFIX = Path("/opt/ckit-runtimes")
ENROOT_HOME = PREFIX / "enroot-4.1.2"
ENROOT_BIN = ENROOT_HOME / "bin"
ENROOT_CONF = ENROOT_HOME / "etc" / "enroot" / "enroot.conf"  # enroot reads only this (and enroot.conf.d)
PYXIS_SO = PREFIX / "pyxis-0.24.0" / "spank_pyxis.so"
NODE_BIN = Path("/usr/local/bin")  # where the nodes (not the host) have enroot's commands
UPSTREAM = "enroot v4.1.2 (github.com/NVIDIA/enroot), Pyxis v0.24.0 (github.com/NVIDIA/pyxis)"


def check_installed() -> None:
    """ComponentError naming what is missing and how to install it (never a skip)."""
    missing = [str(path) for path in (ENROOT_BIN / "enroot", ENROOT_CONF, PYXIS_SO) if not path.exists()]
    if missing:
        raise ComponentError(f"{', '.join(missing)} missing: run `bash tests/infra/install.sh` as root; it installs "
                             f"the runtimes from ../shared/runtimes ({UPSTREAM})")


def link_commands(folder: Path) -> None:
    """``folder``: a link to each of enroot's commands (enroot runs its helpers, enroot-nsenter…, from PATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    for command in ENROOT_BIN.iterdir():
        link = folder / command.name
        link.unlink(missing_ok=True)
        link.symlink_to(command)


def enroot_home(run: Path, node: str) -> Path:
    """Where node ``node`` keeps enroot's containers (``data/user-UID``), layers, runtime and temporary files."""
    return run / "enroot" / node


def enroot_conf_text(run: Path, node: str) -> str:
    home = enroot_home(run, node)
    # enroot evaluates each value (`eval echo`): $(id -u) makes a folder per user, as site configs do; it creates
    # those folders itself, but not its temporary folder: one for all users, sticky as /tmp
    lines = [f"ENROOT_{key} {home}/{sub}/user-$(id -u)" for key, sub in
             (("RUNTIME_PATH", "run"), ("CACHE_PATH", "cache"), ("DATA_PATH", "data"))]
    lines.append(f"ENROOT_TEMP_PATH {home}/tmp")
    return ("# written by tests/infra/pyxis.py for the test node " + node + "\n" + "\n".join(lines) +
            "\n# the test registries are plain http\nENROOT_ALLOW_HTTP yes\n")


def write_node(run: Path, node: str, conf: Path) -> None:
    """The node's enroot.conf and its folders (every user may make its own folder in them)."""
    home = enroot_home(run, node)
    for sub in ("run", "cache", "data", "tmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
        (home / sub).chmod(0o1777)
    conf.write_text(enroot_conf_text(run, node))


def containers(run: Path, node: str) -> list[str]:
    """The enroot containers on ``node`` (every user's), as ``enroot list`` shows each user its own."""
    data = enroot_home(run, node) / "data"
    return sorted(entry.name for user in data.glob("user-*") if user.is_dir() for entry in user.iterdir())


def plugstack_text(runtime_path: str, *, importer: Path | None = None, squashfuse: bool = False) -> str:
    options = [f"runtime_path={runtime_path}", "container_scope=global"]
    if squashfuse:
        options.append("use_squashfuse=1")
    if importer is not None:
        options.append(f"importer={importer}")
    return f"required {PYXIS_SO} {' '.join(options)}\n"


@contextmanager
def configured(conf_dir: Path, runtime_path: str, *, importer: Path | None = None,
               squashfuse: bool = False) -> Iterator[None]:
    """Pyxis with these options for the steps submitted inside the block; the default ones after it.

    One configuration at a time: the block holds an exclusive lock (a second test session's module waits)."""
    plugstack = conf_dir / "plugstack.conf"
    with open(conf_dir / "plugstack.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            write_plugstack(plugstack, plugstack_text(runtime_path, importer=importer, squashfuse=squashfuse))
            yield
        finally:
            write_plugstack(plugstack, plugstack_text(runtime_path))
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_plugstack(path: Path, text: str) -> None:
    """Replaced atomically: an srun starting meanwhile reads the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
