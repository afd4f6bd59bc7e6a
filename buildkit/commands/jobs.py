"""``ckit jobs``, ``ckit logs JOB [-f]``, ``ckit cancel JOB`` and ``ckit shell`` (squeue, tail -f, scancel, salloc)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..config import limits
from ..outside import shown
from .app import SETTINGS, JsonOpt, app, emit_json, info, say, whole_number

if TYPE_CHECKING:
    from ..launch.slurmctl import LogPiece

Opt = typer.Option
JobArg = Annotated[str, typer.Argument(metavar="JOB", help="Slurm job id.")]


def _cell(value: str, width: int) -> str:
    """One column of the table: anyone's job name may hold ``|``, newlines or escapes; it keeps its place."""
    return f"{shown(value)[:width]:<{width}}"


@app.command("jobs")
def jobs_cmd(
    everyone: Annotated[bool, Opt("--all", help="Everyone's jobs, not only yours.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Your jobs in the queue (squeue -u $USER)."""
    from ..launch import slurmctl

    found = slurmctl.jobs(os.environ.get("USER") or None, everyone)
    if as_json:
        emit_json({"jobs": [j.as_json() for j in found]})
        return
    say(f"{'JOB':>8}  {'NAME':<16} {'STATE':<11} {'PARTITION':<10} {'NODES':>5} {'TIME':>10}  WHERE")
    for job in found:
        say(f"{shown(job.job_id):>8}  {_cell(job.name, 16)} {_cell(job.state, 11)} {_cell(job.partition, 10)} "
            f"{shown(job.nodes):>5} {shown(job.time):>10}  {shown(job.where)}")


def _skipped(piece: LogPiece, path: Path) -> None:
    if piece.skipped:
        info(f"[{piece.skipped} bytes of the log left out here: ckit logs shows at most the last "
             f"{limits.size('log_tail')} bytes at a time (CKIT_MAX_LOG_TAIL); the whole log is {path}]")


@app.command("logs")
def logs_cmd(
    job: JobArg,
    follow: Annotated[bool, Opt("-f", "--follow", help="Keep printing until the job ends (tail -f).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """The output of JOB (the end of its --output file), or follow it while it runs."""
    from ..launch import slurmctl

    path = slurmctl.log_file(slurmctl.check_job_id(job), Path.cwd())
    if as_json:
        if follow:
            for _ in slurmctl.follow(path, job, lambda: slurmctl.is_active(job)):
                pass
        piece, _ = slurmctl.read_log(path, job)
        emit_json({"job_id": job, "log": str(path), "text": piece.data.decode("utf-8", "replace"),
                   "skipped_bytes": piece.skipped, "state": slurmctl.job_fields(job).get("JobState")})
        return
    info(f"log: {path}")
    if follow:
        pieces = slurmctl.follow(path, job, lambda: slurmctl.is_active(job))
    else:
        pieces = iter([slurmctl.read_log(path, job)[0]])
    for piece in pieces:
        _skipped(piece, path)
        say(piece.data, nl=False)


@app.command("cancel")
def cancel_cmd(job: JobArg, as_json: JsonOpt = False) -> None:
    """Cancel JOB (scancel)."""
    from ..launch import slurmctl

    result = slurmctl.cancel(job)
    if as_json:
        emit_json(result)
    else:
        info(f"cancelled job {job}")


@app.command("shell", context_settings={"allow_interspersed_args": False})
def shell_cmd(
    site: Annotated[str, Opt("--site", help="Site profile (ckit sites).")],
    command: Annotated[list[str] | None, typer.Argument(metavar="[-- COMMAND…]",
                                                        help="Program instead of a shell.")] = None,
    image: Annotated[str | None, Opt("--image", metavar="REF|PATH|STACK", help="Image to open.")] = None,
    runtime: Annotated[str | None, Opt("--runtime", help="Runtime (default: the site's first).")] = None,
    partition: Annotated[str | None, Opt("-p", "--partition", help="Partition.")] = None,
    account: Annotated[str | None, Opt("-A", "--account", help="Project account.")] = None,
    comment: Annotated[str | None, Opt("--comment", help="Job comment.")] = None,
    time: Annotated[str | None, Opt("-t", "--time", help="Walltime.")] = None,
    gpus_per_node: Annotated[int | None, Opt("--gpus-per-node", parser=whole_number, help="GPUs.")] = None,
    mount: Annotated[list[str] | None, Opt("--mount", metavar="SRC:DST", help="Bind mount.")] = None,
    env: Annotated[list[str] | None, Opt("--env", metavar="K=V", help="Environment.")] = None,
    dry_run: Annotated[bool, Opt("--dry-run", help="Print the salloc command; start nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """A shell in the container on a compute node (salloc + srun --pty), with the site's rules checked."""
    from ..launch.plan import LaunchRequest, plan_launch
    from ..launch.schedulers.slurm import SHELL, render_shell
    from ..process import interactive, require
    from ..site import load_site
    from .launch import _pairs, local_image

    request = LaunchRequest(command=tuple(command or SHELL), image=local_image(image), runtime=runtime, partition=partition,
                            account=account, comment=comment, time=time, gpus_per_node=gpus_per_node,
                            tasks_per_node=1, name="ckit-shell", mounts=tuple(mount or ()), env=_pairs(env, "--env"))
    plan = plan_launch(load_site(site, SETTINGS.sites_dirs), request)
    options, text = render_shell(plan)
    argv = ["salloc", *options, "bash", "-c", text]
    if dry_run or as_json:
        if as_json:
            emit_json({"site": plan.site.name, "argv": argv, "ran": not dry_run})
        else:
            say(" ".join(argv[:-1]) + " '…'\n" + text, nl=False)
        if dry_run:
            return
    require("salloc", purpose="open an interactive allocation", package="slurm-client")
    code = interactive(argv)
    if code:
        raise typer.Exit(code)
