"""``ckit jobs [--since]``, ``ckit logs JOB [-f]``, ``ckit cancel JOB`` and ``ckit shell``: the site's scheduler
answers (:mod:`buildkit.launch.jobcontrol`), through the Python API."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..api._cli import limits
from ..outside import shown
from .app import SETTINGS, JsonOpt, app, complete_site, emit_json, info, say, whole_number

if TYPE_CHECKING:
    from ..api import JobEntry

Opt = typer.Option
JobArg = Annotated[str, typer.Argument(metavar="JOB", help="Slurm job id.")]
SiteOpt = Annotated[str | None, Opt("--site", metavar="SITE", autocompletion=complete_site, help=(
    "The site whose scheduler to ask (default: the one ckit recorded for the job, else the Slurm of "
    "SLURM_CONF)."))]


def _cell(value: str, width: int) -> str:
    """One column of the table: anyone's job name may hold ``|``, newlines or escapes; it keeps its place."""
    return f"{shown(value)[:width]:<{width}}"


def _table(found: list[JobEntry], history: bool) -> None:
    last = "SUBMITTED            EXIT  WHERE" if history else "WHERE"
    say(f"{'JOB':>8}  {'NAME':<16} {'STATE':<11} {'PARTITION':<10} {'NODES':>5} {'TIME':>10}  {last}")
    for job in found:
        extra = f"{shown(job.submitted):<19}  {'' if job.exit_code is None else job.exit_code:>4}  " if history \
            else ""
        say(f"{shown(job.job_id):>8}  {_cell(job.name, 16)} {_cell(job.state, 11)} {_cell(job.partition, 10)} "
            f"{shown(job.nodes):>5} {shown(job.time):>10}  {extra}{shown(job.where)}")


@app.command("jobs")
def jobs_cmd(
    everyone: Annotated[bool, Opt("--all", help="Everyone's jobs, not only yours.")] = False,
    since: Annotated[str | None, Opt("--since", metavar="WHEN", help=(
        "The jobs submitted since WHEN (2d, 12h, 30m, 1w or YYYY-MM-DD), finished ones too: from sacct where "
        "the cluster keeps accounting, else from ckit's records of the jobs it submitted."))] = None,
    site: SiteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Your jobs in the queue (squeue -u $USER), or with --since the ones you submitted since then."""
    from .. import api

    found = api.jobs(site=site, everyone=everyone, since=since, sites=SETTINGS.sites_dirs)
    if as_json:
        emit_json({"jobs": [j.as_json() for j in found]})
        return
    if since is not None and found and found[0].source == "records":
        info("no accounting on this cluster (sacct): the jobs ckit submitted, from its records")
    _table(found, since is not None)


def _skipped(count: int | None, path: Path) -> None:
    if count:
        info(f"[{count} bytes of the log left out here: ckit logs shows at most the last "
             f"{limits.size('log_tail')} bytes at a time (CKIT_MAX_LOG_TAIL); the whole log is {path}]")


@app.command("logs")
def logs_cmd(
    job: JobArg,
    follow: Annotated[bool, Opt("-f", "--follow", help="Keep printing until the job ends (tail -f).")] = False,
    site: SiteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The output of JOB (the end of its -o file, then of its -e file), or follow it while it runs."""
    from .. import api

    if as_json:
        if follow:
            for _ in api.follow(job, site=site, sites=SETTINGS.sites_dirs):
                pass
        emit_json(api.logs(job, site=site, sites=SETTINGS.sites_dirs).as_json())
        return
    files = api.log_files(job, site=site, sites=SETTINGS.sites_dirs)
    info(f"log: {files.output}" + (f"; errors: {files.error}" if files.error else ""))
    if follow:
        for piece in api.follow(job, site=site, sites=SETTINGS.sites_dirs):
            _skipped(piece.skipped, files.error if piece.stream == "error" and files.error else files.output)
            say(piece.data, nl=False)
        return
    text = api.logs(job, site=site, sites=SETTINGS.sites_dirs)
    for data, skipped, path in ((text.text, text.skipped_bytes, files.output),
                                (text.error_text, text.error_skipped_bytes, files.error)):
        if data is None or path is None:
            continue
        if path is files.error:
            info(f"--- {path} (-e) ---")
        _skipped(skipped, path)
        say(data, nl=False)


@app.command("cancel")
def cancel_cmd(job: JobArg, site: SiteOpt = None, as_json: JsonOpt = False) -> None:
    """Cancel JOB (scancel)."""
    from .. import api

    result = api.cancel(job, site=site, sites=SETTINGS.sites_dirs)
    if as_json:
        emit_json(result.as_json())
    elif result.cancelled:
        info(f"cancelled job {job}")
    else:
        info(f"job {job} had already ended ({result.state}): nothing to cancel")


@app.command("shell", context_settings={"allow_interspersed_args": False})
def shell_cmd(
    site: Annotated[str | None, Opt("--site", help=(
        "Site profile (ckit sites; default: CKIT_SITE, else site in the config file)."))] = None,
    command: Annotated[list[str] | None, typer.Argument(metavar="[-- COMMAND…]",
                                                        help="Program instead of a shell.")] = None,
    image: Annotated[str | None, Opt("--image", metavar="REF|PATH|STACK", help="Image to open.")] = None,
    runtime: Annotated[str | None, Opt("--runtime", help="Runtime (default: the site's first).")] = None,
    partition: Annotated[str | None, Opt("-p", "--partition", help="Partition (default: as ckit launch).")] = None,
    account: Annotated[str | None, Opt("-A", "--account", help="Project account (default: as ckit launch).")
                       ] = None,
    comment: Annotated[str | None, Opt("--comment", help="Job comment.")] = None,
    time: Annotated[str | None, Opt("-t", "--time", help="Walltime (default: as ckit launch).")] = None,
    gpus_per_node: Annotated[int | None, Opt("--gpus-per-node", parser=whole_number, help="GPUs.")] = None,
    mount: Annotated[list[str] | None, Opt("--mount", "--bind", "-B", metavar="SRC:DST[:ro]",
                                           help="Bind mount (repeatable; --bind and -B as in apptainer).")] = None,
    env: Annotated[list[str] | None, Opt("--env", metavar="K=V", help="Environment.")] = None,
    dry_run: Annotated[bool, Opt("--dry-run", help="Print the salloc command; start nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """A shell in the container on a compute node (salloc + srun --pty), with the site's rules checked."""
    from .. import api

    request = api.LaunchRequest(command=tuple(command or ()), image=image, runtime=runtime, partition=partition,
                            account=account, comment=comment, time=time, gpus_per_node=gpus_per_node,
                            tasks_per_node=1, name="ckit-shell", mounts=tuple(mount or ()),
                            env=api.env_pairs(env or ()))
    shell = api.shell_command(site, request, sites=SETTINGS.sites_dirs, defaults=SETTINGS.config)
    if dry_run or as_json:
        if as_json:
            emit_json(shell.as_json(ran=not dry_run))
        else:
            say(" ".join(shell.argv[:-1]) + " '…'\n" + shell.text, nl=False)
        if dry_run:
            return
    code = api.shell(site, request, sites=SETTINGS.sites_dirs, defaults=SETTINGS.config)
    if code:
        raise typer.Exit(code)
