"""``ckit launch`` (a checked job for a site: plan → render → execute), ``ckit backends`` and ``ckit nccl-report``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import CkitError, ConfigError
from ..launch import frameworks, nccl_report, runtimes, schedulers
from ..launch.plan import ImageFacts, LaunchRequest
from .app import SETTINGS, DryRunOpt, JsonOpt, app, emit_json, info, number, say, warn, whole_number

Opt = typer.Option
Many = list[str] | None


def _pairs(values: list[str] | None, flag: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"{flag} {item!r} is not K=V", hint=f"write {flag} NAME=value")
        out.append((key, value))
    return tuple(out)


def local_image(value: str | None) -> str | None:
    """``--image`` as the job names it: a relative file path becomes the absolute path of that file here, since
    the tasks may start in another folder and Pyxis takes ``images/x.sqsh`` for a registry image (a file is only
    what starts with / or .). A relative path that names no file is refused: it can only be a typo."""
    from ..launch.plan import names_a_file

    if value is None or not names_a_file(value) or value.startswith(("/", "~")):
        return value
    path = Path(os.path.abspath(value))
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise ConfigError(f"--image {value}: {path} {what}",
                          hint=f"give the path of an image file (ls {path.parent}), a registry reference such as "
                               "nvcr.io/nvidia/pytorch:24.06-py3, or a stack staged with ckit stage")
    return str(path)


def image_facts(value: str | None) -> ImageFacts:
    """The squashfs compression of a .sif/.sqsh that exists on this machine (the site's kernel must mount it)."""
    path = Path(value).expanduser() if value else None
    if path is None or not path.is_file():
        return ImageFacts()
    from ..image import inspect as reader
    from ..image.sif import write as sif

    try:
        offset = 0
        if reader.detect(path) == "sif":
            part = sif.read_sif(path).primary_partition()
            if part is None or part.fstype != sif.FS_SQUASHFS:
                return ImageFacts()
            offset = part.offset
        return ImageFacts(compression=reader.superblock(path, offset)["compression"])
    except (CkitError, OSError):
        return ImageFacts()  # not a squashfs image ckit can read: the runtime judges it


@app.command(context_settings={"allow_interspersed_args": False})
def launch(
    site: Annotated[str, Opt("--site", help="Site profile (ckit sites).")],
    command: Annotated[list[str] | None, typer.Argument(metavar="-- COMMAND [ARGS…]", help="Program to run.")] = None,
    image: Annotated[str | None, Opt("--image", metavar="REF|PATH|STACK", help="Image to run.")] = None,
    framework: Annotated[str, Opt("--framework", help=frameworks.REGISTRY.help() + ".")] = "none",
    launcher: Annotated[str | None, Opt("--launcher", help="; ".join(
        f"{f.name}: {'|'.join(f.launchers)}" for f in frameworks.REGISTRY.all() if f.launchers) + ".")] = None,
    rank_table: Annotated[str | None, Opt("--rank-table", help="MindSpore rank table: v1 or legacy (0.x); "
                                                                "default: the site's, else v1.")] = None,
    nodes: Annotated[int, Opt("-N", "--nodes", parser=whole_number, help="Number of nodes.")] = 1,
    gpus_per_node: Annotated[int | None, Opt("--gpus-per-node", parser=whole_number, help="GPUs per node.")] = None,
    devices_per_node: Annotated[int | None, Opt("--devices-per-node", parser=whole_number, help=(
        "Processes per node of a per-node launcher (torchrun, horovodrun, msrun, MindSpore's device loop); "
        "default: the GPUs per node."))] = None,
    tasks_per_node: Annotated[int | None, Opt("--tasks-per-node", "--ntasks-per-node", parser=whole_number, help="Tasks per node.")] = None,
    cpus_per_task: Annotated[int | None, Opt("-c", "--cpus-per-task", parser=whole_number, help="CPUs per task.")] = None,
    time: Annotated[str | None, Opt("-t", "--time", help="Walltime (HH:MM:SS or D-HH:MM:SS).")] = None,
    partition: Annotated[str | None, Opt("-p", "--partition", help="Partition (default: the site's).")] = None,
    account: Annotated[str | None, Opt("-A", "--account", help="Project account.")] = None,
    comment: Annotated[str | None, Opt("--comment", help="Job comment (neuron: the application).")] = None,
    name: Annotated[str, Opt("-J", "--job-name", "--name", help="Job name.")] = "ckit",
    env: Annotated[Many, Opt("--env", metavar="K=V", help="Environment (repeatable).")] = None,
    mount: Annotated[Many, Opt("--mount", metavar="SRC:DST[:ro]", help="Bind mount (repeatable).")] = None,
    runtime: Annotated[str | None, Opt("--runtime", help=runtimes.REGISTRY.help()
                                       + " (default: the site's first).")] = None,
    workdir: Annotated[str | None, Opt("--workdir", metavar="DIR",
                                       help="Folder the tasks start in (default: the submit folder).")] = None,
    module: Annotated[Many, Opt("--module", metavar="NAME", help="Environment module to load (repeatable).")] = None,
    conda: Annotated[str | None, Opt("--conda", metavar="ENV", help="Conda environment to activate.")] = None,
    venv: Annotated[str | None, Opt("--venv", metavar="PATH", help="Python venv to activate.")] = None,
    pre: Annotated[Many, Opt("--pre", metavar="SHELL", help="Shell line run before the job (repeatable).")] = None,
    mpi: Annotated[str | None, Opt("--mpi", metavar="PLUGIN",
                                   help="srun --mpi plugin for MPI steps (default: the site's).")] = None,
    gloo: Annotated[bool, Opt("--gloo", help="horovodrun: use Gloo with --network-interface.")] = False,
    network_interface: Annotated[str | None, Opt("--network-interface", help="Interface for Gloo.")] = None,
    keep_container: Annotated[bool, Opt("--keep-container", help="pyxis: keep the container for later jobs "
                                                                  "(named after the image's content).")] = False,
    output: Annotated[str | None, Opt("-o", "--output", metavar="LOG",
                                      help="The job's log (sbatch's -o; default NAME-%j.out).")] = None,
    error: Annotated[str | None, Opt("-e", "--error", metavar="LOG", help="A separate log for stderr.")] = None,
    mail_type: Annotated[str | None, Opt("--mail-type", metavar="TYPE[,TYPE]", help="sbatch --mail-type.")] = None,
    mail_user: Annotated[str | None, Opt("--mail-user", metavar="ADDRESS", help="sbatch --mail-user.")] = None,
    script: Annotated[Path | None, Opt("--script", metavar="PATH", help=(
        "Where the job script goes (default NAME.sbatch; dlws sites: the folder for its files)."))] = None,
    dry_run: DryRunOpt = False,
    do_submit: Annotated[bool | None, Opt("--submit/--no-submit",
                                          help="Submit, or only write the script (default: submit when sbatch "
                                               "exists).")] = None,
    wait: Annotated[bool, Opt("--wait", help="With --submit: wait and return the job's exit code.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write a job for SITE, check it against the site's rules and submit it."""
    from ..launch.plan import plan_launch
    from ..site import load_site

    image = local_image(image)
    request = LaunchRequest(
        command=tuple(command or ()), image=image, framework=framework, launcher=launcher, rank_table=rank_table,
        nodes=nodes, gpus_per_node=gpus_per_node, tasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task,
        time=time, partition=partition, account=account, comment=comment, name=name, env=_pairs(env, "--env"),
        mounts=tuple(mount or ()), runtime=runtime, gloo=gloo, network_interface=network_interface,
        devices_per_node=devices_per_node, workdir=workdir, modules=tuple(module or ()), conda=conda, venv=venv,
        pre=tuple(pre or ()), output=output, error=error, mail_type=mail_type, mail_user=mail_user,
        keep_container=keep_container, mpi=mpi)
    plan = plan_launch(load_site(site, SETTINGS.sites_dirs), request, image_facts(image))
    for message in plan.warnings:
        warn(message)
    scheduler = schedulers.REGISTRY.get(plan.site.scheduler, "site scheduler")
    how = schedulers.Execution(dry_run=dry_run, submit=do_submit, wait=wait, script=script)
    result = scheduler.execute(plan, scheduler.render(plan), how)
    _report(result, as_json)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _report(result: schedulers.LaunchResult, as_json: bool) -> None:
    for target, local in result.files.items():
        info(f"wrote {local}: copy it to {target} on the platform")
    if result.script:
        info(f"wrote {result.script}")
    if result.job_id:
        info(f"submitted job {result.job_id}")
    if result.exit_code is not None:
        info(f"job {result.job_id} finished with exit code {result.exit_code}; output: {result.output}")
    for run in result.extra.get("nccl", []):
        info(nccl_report.NcclReport.from_dict(run).text().rstrip("\n"))
    if "nccl_error" in result.extra:
        warn(f"no nccl-tests report: {result.extra['nccl_error']}")
    if as_json:
        emit_json(result.as_json())
    elif result.job_id:
        say(result.job_id)
    elif not result.script or result.scheduler != "slurm":
        say(result.text, nl=False)


@app.command("backends")
def backends_cmd(as_json: JsonOpt = False) -> None:
    """The runtimes, frameworks and schedulers ckit launch knows (one module each)."""
    data: dict[str, list[dict[str, Any]]] = {
        "runtimes": [{"name": b.name, "summary": b.summary, "files": list(b.files), "references": b.refs}
                     for b in runtimes.REGISTRY.all()],
        "frameworks": [{"name": b.name, "summary": b.summary, "launchers": list(b.launchers)}
                       for b in frameworks.REGISTRY.all()],
        "schedulers": [{"name": b.name, "summary": b.summary} for b in schedulers.REGISTRY.all()],
    }
    if as_json:
        emit_json(data)
        return
    for kind, items in data.items():
        say(f"{kind}:")
        for item in items:
            extra = f" (launchers: {', '.join(item['launchers'])})" if item.get("launchers") else ""
            say(f"  {item['name']:<12} {item['summary']}{extra}")


@app.command("nccl-report")
def nccl_report_cmd(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Output of all_reduce_perf (the job's .out file).")],
    expect: Annotated[float | None, Opt("--expect", metavar="GBPS", parser=number,
                                        help="Exit 1 when a run's average bus bandwidth is below GBPS.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Bus-bandwidth report of each nccl-tests run in FILE."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ConfigError(f"{file}: cannot read: {err.strerror}") from err
    runs = nccl_report.parse_runs(text, str(file))
    low = [i for i, r in enumerate(runs, 1) if expect is not None and r.avg_busbw < expect]
    if as_json:
        emit_json({"runs": [r.as_json() for r in runs], "expect_gbps": expect, "below": low})
    else:
        for index, run in enumerate(runs, 1):
            say(f"run {index}:" if len(runs) > 1 else "", nl=len(runs) > 1)
            say(run.text(), nl=False)
    if low:
        warn(f"run {', '.join(map(str, low))} below the expected {expect:g} GB/s average bus bandwidth")
        raise typer.Exit(1)
