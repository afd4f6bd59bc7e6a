"""What ``ckit sites detect`` asks the cluster, kept as the text it answered (so that the profile is built from the
answers by a pure function, and the tests replay real answers): Slurm's commands on the login node, the probe
script there and in a one-task job on a compute node, the plugstack files Pyxis reads."""

from __future__ import annotations

import glob
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CkitError, CommandFailed
from . import probe, slurmtext


@dataclass(frozen=True)
class Answer:
    returncode: int
    stdout: str
    stderr: str = ""


# argv -> its answer; a program that is missing or does not answer is an Answer with returncode 127 or 124
Ask = Callable[[list[str]], Answer]


@dataclass(frozen=True)
class Answers:
    partitions: str
    nodes: str
    config: str = ""
    mpi_list: str = ""
    test_only: Answer | None = None  # sbatch --test-only without --account or --comment
    associations: str = ""
    login_probe: str = ""
    compute_probe: str = ""  # empty: the probe job did not run
    compute_error: str = ""
    plugstack: str = ""  # the plugstack lines that name pyxis
    markers: dict[str, str] = field(default_factory=dict)  # marker file -> the folder it stands for
    user: str = ""


def slurm_ask(timeout: float = 60.0) -> Ask:
    """Ask through the one process runner; no answer in ``timeout`` s is returncode 124, no program 127."""
    from ..errors import CommandTimeout
    from ..process import run, which

    def ask(argv: list[str]) -> Answer:
        if which(argv[0]) is None:
            return Answer(127, "", f"{argv[0]}: not found")
        try:
            result = run(argv, step=f"ask {argv[0]}", check=False, timeout=timeout)
        except CommandTimeout:
            return Answer(124, "", f"{argv[0]} did not answer in {timeout:g} s")
        except CommandFailed as err:  # not raised with check=False; kept for a runner that does
            return Answer(err.returncode, "", err.stderr_tail)
        return Answer(result.returncode, result.stdout, result.stderr)

    return ask


def _plugstack(config_text: str) -> str:
    """The lines of slurm.conf's PlugStackConfig (and the files it includes) that load pyxis."""
    path = slurmtext.config(config_text).get("PlugStackConfig") or "/etc/slurm/plugstack.conf"
    lines, files, seen = [], [path], set[str]()
    while files:
        name = files.pop(0)
        if name in seen or len(seen) > 50:
            continue
        seen.add(name)
        try:
            text = Path(name).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["include"] and len(words) > 1:
                files += sorted(glob.glob(os.path.join(os.path.dirname(name), words[1])
                                          if not words[1].startswith("/") else words[1]))
            elif "pyxis" in line and not line.lstrip().startswith("#"):
                lines.append(line.strip())
    return "\n".join(lines)


def _marker_folders() -> list[Path]:
    """Where a shared image folder may be: the scratch and work folders sites export, then the home folder."""
    user = os.environ.get("USER", "")
    candidates = [os.environ.get("SCRATCH"), os.environ.get("WORK"), f"/scratch/{user}" if user else None,
                  os.environ.get("HOME")]
    return [Path(c) for c in dict.fromkeys(c for c in candidates if c) if os.path.isdir(c)]


def gather(ask: Ask, *, partition: str | None = None, time_limit: str = "5",
           registry_url: str = probe.DEFAULT_REGISTRY_URL, on_step: Callable[[str], None] = lambda s: None
           ) -> Answers:
    """Ask the cluster everything the profile is built from; a question Slurm refuses leaves its answer empty
    (the profile then says the value is uncertain). The marker files are removed before it returns."""
    on_step("Slurm: partitions, nodes, configuration")
    parts = ask(["scontrol", "-o", "show", "partition"])
    if parts.returncode != 0:
        raise CkitError(f"scontrol cannot list the partitions: {parts.stderr.strip()[-300:] or 'no answer'}",
                        hint="run ckit sites detect on a login node of the cluster (where sinfo works); "
                             "check SLURM_CONF and `scontrol ping`")
    nodes, conf = ask(["scontrol", "-o", "show", "node"]), ask(["scontrol", "show", "config"])
    mpi = ask(["srun", "--mpi=list"])
    user = os.environ.get("USER", "")
    assoc = ask(["sacctmgr", "-nP", "show", "assoc", f"user={user}", "format=Account,QOS"]) if user else Answer(1, "")
    default = partition or _default_partition(parts.stdout)
    test_only = ask(["sbatch", "--test-only", "-N", "1", "-n", "1", "-t", "1", "-J", "ckit-detect",
                     *(["-p", default] if default else []), "--wrap", "true"])
    markers = _write_markers()
    try:
        on_step("login node: runtimes, modules, file systems")
        script = probe.script(tuple(markers), registry_url)
        login = ask(["sh", "-c", script])
        on_step(f"compute node: a one-task probe job{f' in partition {default}' if default else ''}")
        compute = ask(["srun", "-N", "1", "-n", "1", "-t", time_limit, "-J", "ckit-detect",
                       *(["-p", default] if default else []), "sh", "-c", script])
    finally:
        for marker in markers:
            Path(marker).unlink(missing_ok=True)
    return Answers(partitions=parts.stdout, nodes=nodes.stdout, config=conf.stdout,
                   mpi_list=mpi.stdout + mpi.stderr, test_only=test_only,
                   associations=assoc.stdout if assoc.returncode == 0 else "", login_probe=login.stdout,
                   compute_probe=compute.stdout if compute.returncode == 0 else "",
                   compute_error="" if compute.returncode == 0 else (compute.stderr.strip()[-300:] or
                                                                      f"srun exit {compute.returncode}"),
                   plugstack=_plugstack(conf.stdout), markers=markers, user=user)


def _default_partition(text: str) -> str | None:
    found = [r.get("PartitionName", "") for r in slurmtext.records(text)]
    defaults = [r.get("PartitionName", "") for r in slurmtext.records(text) if r.get("Default") == "YES"]
    names = defaults or found
    return names[0] if names else None


def _write_markers() -> dict[str, str]:
    """One small file per candidate folder; a compute node that sees it shares the folder with this node."""
    out = {}
    token = secrets.token_hex(8)
    for folder in _marker_folders():
        marker = folder / f".ckit-detect-{token}"
        try:
            marker.write_text("ckit sites detect: removed when it ends\n")
        except OSError:
            continue
        out[str(marker)] = str(folder)
    return out
