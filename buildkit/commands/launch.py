"""``ckit launch`` (a checked job for a site: plan → render → execute), ``ckit backends`` and ``ckit nccl-report``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..api._cli import FRAMEWORKS, RUNTIMES, JobEvent, NcclReport
from ..outside import shown
from .app import SETTINGS, DryRunOpt, JsonOpt, app, emit_json, info, number, say, warn, whole_number

if TYPE_CHECKING:
    from ..api import LaunchResult

Opt = typer.Option
Many = list[str] | None


@app.command(context_settings={"allow_interspersed_args": False})
def launch(
    site: Annotated[str | None, Opt("--site", help=(
        "Site profile (ckit sites; default: CKIT_SITE, else site in the config file)."))] = None,
    command: Annotated[list[str] | None, typer.Argument(metavar="-- COMMAND [ARGS…]", help=(
        "Program to run, once per node without a framework. Its words reach it as written, except $NAME/${NAME} "
        "naming a variable the job defines (SLURM_*, the framework's, --env names), filled in per task; $$ is a "
        "literal $."))] = None,
    image: Annotated[str | None, Opt("--image", metavar="REF|PATH|STACK", help="Image to run.")] = None,
    framework: Annotated[str, Opt("--framework", help=FRAMEWORKS.help() + ".")] = "none",
    launcher: Annotated[str | None, Opt("--launcher", help="; ".join(
        f"{f.name}: {'|'.join(f.launchers)}" for f in FRAMEWORKS.all() if f.launchers) + ".")] = None,
    rank_table: Annotated[str | None, Opt("--rank-table", help="MindSpore rank table: v1 or legacy (0.x); "
                                                                "default: the site's, else v1.")] = None,
    nodes: Annotated[int, Opt("-N", "--nodes", parser=whole_number, help="Number of nodes.")] = 1,
    gpus_per_node: Annotated[int | None, Opt("--gpus-per-node", parser=whole_number, help="GPUs per node.")] = None,
    devices_per_node: Annotated[int | None, Opt("--devices-per-node", parser=whole_number, help=(
        "Processes per node of a per-node launcher (torchrun, horovodrun, msrun, MindSpore's device loop); "
        "default: the GPUs per node."))] = None,
    tasks_per_node: Annotated[int | None, Opt("--tasks-per-node", "--ntasks-per-node", parser=whole_number, help="Tasks per node.")] = None,
    cpus_per_task: Annotated[int | None, Opt("-c", "--cpus-per-task", parser=whole_number, help="CPUs per task.")] = None,
    mem: Annotated[str | None, Opt("--mem", metavar="SIZE", help="Memory per node (sbatch's --mem: 10G, 4000M).")] = None,
    mem_per_cpu: Annotated[str | None, Opt("--mem-per-cpu", metavar="SIZE", help="Memory per CPU (sbatch's).")] = None,
    mem_per_gpu: Annotated[str | None, Opt("--mem-per-gpu", metavar="SIZE", help="Memory per GPU (sbatch's).")] = None,
    time: Annotated[str | None, Opt("-t", "--time", help=(
        "Walltime (HH:MM:SS or D-HH:MM:SS; default: SBATCH_TIMELIMIT, else the config file's)."))] = None,
    partition: Annotated[str | None, Opt("-p", "--partition", help=(
        "Partition (default: SBATCH_PARTITION, else the config file's, else the site's)."))] = None,
    account: Annotated[str | None, Opt("-A", "--account", help=(
        "Project account (default: SBATCH_ACCOUNT, else the config file's)."))] = None,
    comment: Annotated[str | None, Opt("--comment", help="Job comment (neuron: the application).")] = None,
    name: Annotated[str, Opt("-J", "--job-name", "--name", help="Job name.")] = "ckit",
    env: Annotated[Many, Opt("--env", metavar="K=V", help=(
        "Environment (repeatable). V may name the job's variables ($PATH, ${USER}: read per task; $$ is a "
        "literal $)."))] = None,
    mount: Annotated[Many, Opt("--mount", "--bind", "-B", metavar="SRC:DST[:ro]",
                               help="Bind mount (repeatable; --bind and -B as in apptainer).")] = None,
    code: Annotated[str | None, Opt("--code", metavar="DIR[:DEST]", help=(
        "Ship the code folder DIR with the job, laid over the image at DEST (default: where the stack's "
        "`files as code` copies DIR), read-only: an edit needs no rebuild. The tasks find it at $CKIT_CODE."
    ))] = None,
    runtime: Annotated[str | None, Opt("--runtime", help=RUNTIMES.help()
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
    array: Annotated[str | None, Opt("--array", metavar="INDEXES", help=(
        "A job array (sbatch --array: 0-9, 1,3,5, 0-99%10); each task reads $SLURM_ARRAY_TASK_ID."))] = None,
    after: Annotated[Many, Opt("--after", metavar="JOB", help=(
        "Start only after JOB ended successfully (sbatch --dependency=afterok; repeatable)."))] = None,
    interactive: Annotated[bool, Opt("--interactive", help=(
        "An allocation with a terminal on its first node instead of a batch job (salloc): the job's modules, "
        "conda/venv and the framework's variables are set; srun starts steps on every node."))] = False,
    fetch: Annotated[Many, Opt("--fetch", metavar="SHELL", help=(
        "A shell line run here, in the image, before the job (downloads for compute nodes without "
        "internet; repeatable)."))] = None,
    endpoint: Annotated[Many, Opt("--endpoint", metavar="NAME", help=(
        "Apulis: tick an endpoint of the job form (ssh, jupyter, tensorboard; repeatable)."))] = None,
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
    preflight: Annotated[bool, Opt("--preflight/--no-preflight", help=(
        "Before submitting, check the conda environment, the modules, a relative program path, the image file "
        "and the task count here (exit 2 with the fix); --no-preflight queues the job unchecked."))] = True,
    as_json: JsonOpt = False,
) -> None:
    """Write a job for SITE, check it against the site's rules and submit it."""
    from .. import api

    request = api.LaunchRequest(
        command=tuple(command or ()), image=image, framework=framework,
        launcher=launcher, rank_table=rank_table,
        nodes=nodes, gpus_per_node=gpus_per_node, tasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task,
        mem=mem, mem_per_cpu=mem_per_cpu, mem_per_gpu=mem_per_gpu,
        time=time, partition=partition, account=account, comment=comment, name=name, env=api.env_pairs(env or ()),
        mounts=tuple(mount or ()), runtime=runtime, gloo=gloo, network_interface=network_interface,
        devices_per_node=devices_per_node, workdir=workdir, modules=tuple(module or ()), conda=conda, venv=venv,
        pre=tuple(pre or ()), output=output, error=error, mail_type=mail_type, mail_user=mail_user,
        keep_container=keep_container, mpi=mpi, array=array, after=tuple(after or ()), interactive=interactive,
        fetch=tuple(fetch or ()), endpoints=tuple(endpoint or ()), code=code)
    plan = api.plan_launch(site, request, sites=SETTINGS.sites_dirs, defaults=SETTINGS.config)
    for message in plan.warnings:
        warn(message)
    watcher = _Watcher(show_output=not as_json)
    result = api.execute(plan, api.Execution(dry_run=dry_run, submit=do_submit, wait=wait, script=script,
                                                    on_event=watcher if wait else None),
                         preflight=preflight)
    for message in result.warnings[len(plan.warnings):]:
        warn(message)
    _report(result, as_json, watched=watcher.submitted)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


class _Watcher:
    """What ``--submit --wait`` shows while it waits: the job's state on stderr each time it changes, then its
    output as it is written (stdout; a separate ``-e`` log to stderr), unless stdout is for ``--json``."""

    def __init__(self, *, show_output: bool) -> None:
        self.show_output, self.submitted = show_output, False

    def __call__(self, event: JobEvent) -> None:
        if event.status is not None:
            if not self.submitted:
                info(f"submitted job {event.job_id}")
            self.submitted = True
            info(f"job {event.job_id}: {event.status.state}")
        elif event.piece is not None and self.show_output:
            if event.piece.skipped:
                info(f"[{event.piece.skipped} bytes of the log left out here (CKIT_MAX_LOG_TAIL)]")
            text = shown(event.piece.data.decode("utf-8", "surrogateescape"), lines=True)
            typer.echo(text, nl=False, err=event.piece.stream == "error")


def _report(result: LaunchResult, as_json: bool, *, watched: bool = False) -> None:
    for target, local in result.files.items():
        info(f"wrote {local}: copy it to {target} on the platform")
    if "code" in result.extra:
        code = result.extra["code"]
        info(f"code {code['digest'][:19]}: {code['files']} files of {code['source']} in {code['folder']}"
             + ("" if code["new"] else " (the same code as an earlier launch)"))
    if result.script and not watched:
        info(f"wrote {result.script}")
    if result.job_id and not watched:
        info(f"submitted job {result.job_id}")
    if result.exit_code is not None:
        info(f"job {result.job_id} finished with exit code {result.exit_code}; output: {result.output}"
             + (f"; script: {result.script}" if watched else ""))
    for run in result.extra.get("nccl", []):
        info(NcclReport.from_dict(run).text().rstrip("\n"))
    if "nccl_error" in result.extra:
        warn(f"no nccl-tests report: {result.extra['nccl_error']}")
    if as_json:
        emit_json(result.as_json())
    elif result.job_id and not watched:  # waited for: stdout held the job's output, the id is on stderr
        say(result.job_id)
    elif not result.script:  # a job written to a file is not printed again
        say(result.text, nl=False)


@app.command("backends")
def backends_cmd(as_json: JsonOpt = False) -> None:
    """The runtimes, frameworks and schedulers ckit launch knows (one module each)."""
    from .. import api

    data = api.backends()
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
    site: Annotated[str | None, Opt("--site", metavar="SITE", help=(
        "Without --expect: exit 1 when a run is below 90 % of the bus bandwidth SITE's profile says it measured "
        "on that many nodes (nccl_busbw; oci: the guide's 233 GB/s on one node, 165 on two)."))] = None,
    as_json: JsonOpt = False,
) -> None:
    """Bus-bandwidth report of each nccl-tests run in FILE.

    Example: ckit nccl-report nccl-1234.out --site oci"""
    from .. import api

    check = api.nccl_report(file, expect=expect, site=site, sites=SETTINGS.sites_dirs)
    if as_json:
        emit_json(check.as_json())
    else:
        for index, run in enumerate(check.runs, 1):
            say(f"run {index}:" if len(check.runs) > 1 else "", nl=len(check.runs) > 1)
            say(run.text(), nl=False)
    for index in check.below:
        want = check.expected[index - 1]
        warn(f"run {index}: {check.runs[index - 1].avg_busbw:g} GB/s average bus bandwidth, below the expected "
             f"{want:g}" + ("" if expect is not None else f" (90 % of what {site}'s profile says it measured)"))
    if check.below:
        raise typer.Exit(1)
