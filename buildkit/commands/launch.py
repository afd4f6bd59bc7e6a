"""``ckit launch`` (a checked job script for a site, written and submitted) and ``ckit nccl-report``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ..cliapp import SETTINGS, DryRunOpt, JsonOpt, app, emit_json, info, warn
from ..errors import ConfigError
from ..launch import nccl_report


def _pairs(values: list[str] | None, flag: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"{flag} {item!r} is not K=V", hint=f"write {flag} NAME=value")
        out.append((key, value))
    return tuple(out)


@app.command(context_settings={"allow_interspersed_args": False})
def launch(
    site: Annotated[str, typer.Option("--site", help="Site profile (ckit sites).")],
    command: Annotated[list[str] | None, typer.Argument(metavar="-- COMMAND [ARGS…]", help="Program to run.")] = None,
    image: Annotated[str | None, typer.Option("--image", metavar="REF|PATH|STACK", help="Image to run.")] = None,
    framework: Annotated[str, typer.Option(
        "--framework", help="none, horovod, ddp, tf, mindspore, ray or nccl-tests.")] = "none",
    launcher: Annotated[str | None, typer.Option(
        "--launcher", help="horovod: srun|horovodrun; ddp: srun|torchrun; mindspore: rank-table|msrun.")] = None,
    rank_table: Annotated[str, typer.Option("--rank-table", help="MindSpore rank table: v1 or legacy (0.x).")] = "v1",
    nodes: Annotated[int, typer.Option("--nodes", help="Number of nodes.")] = 1,
    gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node", help="GPUs per node.")] = None,
    devices_per_node: Annotated[int | None, typer.Option("--devices-per-node", help="Ascend NPUs per node.")] = None,
    tasks_per_node: Annotated[int | None, typer.Option("--tasks-per-node", help="Tasks per node.")] = None,
    cpus_per_task: Annotated[int | None, typer.Option("--cpus-per-task", help="CPUs per task.")] = None,
    time: Annotated[str | None, typer.Option("--time", help="Walltime (HH:MM:SS or D-HH:MM:SS).")] = None,
    partition: Annotated[str | None, typer.Option("--partition", help="Partition (default: the site's).")] = None,
    account: Annotated[str | None, typer.Option("--account", help="Project account.")] = None,
    comment: Annotated[str | None, typer.Option("--comment", help="Job comment (neuron: the application).")] = None,
    name: Annotated[str, typer.Option("--name", help="Job name.")] = "ckit",
    env: Annotated[list[str] | None, typer.Option("--env", metavar="K=V", help="Environment (repeatable).")] = None,
    mount: Annotated[list[str] | None, typer.Option("--mount", metavar="SRC:DST", help="Bind mount.")] = None,
    runtime: Annotated[str | None, typer.Option(
        "--runtime", help="singularity, apptainer, pyxis, podman or none (default: the site's first).")] = None,
    gloo: Annotated[bool, typer.Option("--gloo", help="horovodrun: use Gloo with --network-interface.")] = False,
    network_interface: Annotated[str | None, typer.Option("--network-interface", help="Interface for Gloo.")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="SCRIPT", help="Script path (dlws sites: folder for the files).")] = None,
    dry_run: DryRunOpt = False,
    do_submit: Annotated[bool, typer.Option("--submit", help="Submit (default when sbatch exists).")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="With --submit: wait and return the job's exit code.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write a job script for SITE, check it against the site's rules and submit it."""
    from ..launch.plan import LaunchRequest, plan_launch
    from ..launch.submit import submit, write_script
    from ..process import which
    from ..site import load_site
    from ..site.policy import submit_from_violation

    request = LaunchRequest(
        command=tuple(command or ()), image=image, framework=framework, launcher=launcher, rank_table=rank_table,
        nodes=nodes, gpus_per_node=gpus_per_node, tasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task,
        time=time, partition=partition, account=account, comment=comment, name=name, env=_pairs(env, "--env"),
        mounts=tuple(mount or ()), runtime=runtime, gloo=gloo, network_interface=network_interface,
        devices_per_node=devices_per_node)
    plan = plan_launch(load_site(site, SETTINGS.sites_dirs), request)
    for message in plan.warnings:
        warn(message)
    if plan.site.scheduler == "dlws":
        from ..launch.dlws import render_dlws

        job = render_dlws(plan)
        written = {} if dry_run else {
            target: str(write_script(content, (output or Path(f"{name}-{site}")) / Path(target).name))
            for target, content in job.files}
        for target, local in written.items():
            info(f"wrote {local}: copy it to {target} on the platform")
        if as_json:
            emit_json({"site": plan.site.name, "form": dict(job.form), "command": job.command,
                       "files": dict(job.files), "written": written})
        else:
            typer.echo(job.text(), nl=False)
        return
    from ..launch.slurm import render_sbatch

    script = render_sbatch(plan)
    if dry_run:
        if as_json:
            emit_json({"site": plan.site.name, "script": script, "warnings": list(plan.warnings)})
        else:
            typer.echo(script, nl=False)
        return
    path = write_script(script, output or Path(f"{name}.sbatch"), inputs=[Path(image)] if image else [])
    info(f"wrote {path}")
    result: dict[str, object] = {"site": plan.site.name, "script": str(path), "job_id": None}
    if do_submit or (not wait and which("sbatch")):
        violation = submit_from_violation(plan.site, Path(os.getcwd()))
        if violation:
            raise violation
        done = submit(path, wait=wait, cwd=Path.cwd())
        result.update(job_id=done.job_id, exit_code=done.exit_code)
        info(f"submitted job {done.job_id}")
        if wait:
            result["output"] = str(Path.cwd() / f"{name}-{done.job_id}.out")
            info(f"job {done.job_id} finished with exit code {done.exit_code}; output: {result['output']}")
    elif wait:
        raise ConfigError("--wait needs --submit", hint="add --submit")
    report = _nccl_report(plan.framework, result.get("output"))
    if report is not None:
        result["nccl"] = report.to_dict()
    if as_json:
        emit_json(result)
    elif result["job_id"]:
        typer.echo(result["job_id"])
        if report is not None:
            info(report.text().rstrip("\n"))
    if wait and isinstance(result.get("exit_code"), int) and result["exit_code"]:
        raise typer.Exit(int(result["exit_code"]))  # type: ignore[arg-type]


def _nccl_report(framework: str, job_output: object) -> nccl_report.NcclReport | None:
    """After ``--wait`` on an nccl-tests job: the bus-bandwidth report of its output file."""
    if framework != "nccl-tests" or not job_output:
        return None
    output = Path(str(job_output))
    try:
        return nccl_report.parse(output.read_text(encoding="utf-8", errors="replace"), str(output))
    except (OSError, ConfigError) as err:
        warn(f"no nccl-tests report from {output}: {err}")
        return None


@app.command("nccl-report")
def nccl_report_cmd(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Output of all_reduce_perf (the job's .out file).")],
    as_json: JsonOpt = False,
) -> None:
    """Bus-bandwidth report from nccl-tests output."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ConfigError(f"{file}: cannot read: {err.strerror}") from err
    report = nccl_report.parse(text, str(file))
    if as_json:
        emit_json(report.to_dict())
    else:
        typer.echo(report.text(), nl=False)
