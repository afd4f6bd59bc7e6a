"""Apulis (DLWorkspace): no sbatch. The job form's fields, its "Command" string and the files the command needs."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .frameworks.mindspore import device_loop
from .plan import LaunchPlan
from .shell import q


@dataclass(frozen=True)
class DlwsJob:
    form: tuple[tuple[str, str], ...]
    command: str
    files: tuple[tuple[str, str], ...] = ()

    def text(self) -> str:
        out = ["Paste into the job form:"]
        out += [f"  {key}: {value}" for key, value in self.form]
        out += ["  Command:", f"    {self.command}"]
        for path, content in self.files:
            out += ["", f"--- file {path} (put it there before submitting) ---", content.rstrip("\n")]
        return "\n".join(out) + "\n"


def launch_script_path(plan: LaunchPlan) -> str:
    return f"/home/${{DLWS_USER_NAME}}/ckit/{plan.request.name}/launch-npu.sh"


def npu_script(plan: LaunchPlan, devs: int) -> str:
    """Per worker: the Ascend environment, the platform's rank table and one process per NPU (seed 003, fixed)."""
    platform = plan.site.platform
    assert platform is not None
    lines = ["#!/bin/bash", f"# ckit launch: site {plan.site.name}, framework mindspore, {devs} NPUs per worker",
             "set -euo pipefail"]
    lines += [f"export {k}={q(v)}" for k, v in platform.npu_env]
    lines += ['export PATH="${PATH}:/usr/local/Ascend/fwkacllib/ccec_compiler/bin"',
              'export PYTHONPATH="${PYTHONPATH:-}:/usr/local/Ascend/opp/op_impl/built-in/ai_core/tbe"']
    lines += [f'export RANK_TABLE_FILE="{platform.rank_table}"', 'export MINDSPORE_HCCL_CONFIG_PATH="${RANK_TABLE_FILE}"',
              f'export RANK_SIZE="$(( ${{DLWS_NUM_WORKER:-1}} * {devs} ))"',
              'export CKIT_RUN_DIR="${HOME}/ckit-runs/${DLWS_JOB_ID}"',
              'export DLWS_ROLE_IDX="${DLWS_ROLE_IDX:-0}"',
              'mkdir -p "${CKIT_RUN_DIR}"',
              f"exec sh -c {q(device_loop(devs, '$DLWS_ROLE_IDX'))} ckit-task \"$@\""]
    return "\n".join(lines) + "\n"


def render_dlws(plan: LaunchPlan) -> DlwsJob:
    platform = plan.site.platform
    if platform is None:
        raise ConfigError(f"{plan.site.name} is not a dlws site")
    if plan.image is None:
        raise ConfigError(f"{plan.site.name} runs every job in a Docker image", hint="add --image REF")
    words = " ".join(q(a) for a in plan.command)
    gpus = max(plan.gpus_per_node, 1)
    if plan.framework == "mindspore":
        gpus = plan.request.devices_per_node or plan.gpus_per_node or 8
    files: tuple[tuple[str, str], ...] = ()
    device = platform.device_types[0] if platform.device_types else "Nvidia"
    if plan.framework == "horovod":
        run = (f"horovodrun -np {plan.nodes * gpus} -hostfile {platform.hostfile} "
               f"-p ${platform.ssh_port_var} --network-interface {q(plan.request.network_interface or platform.network_interface)} {words}")
    elif plan.framework == "mindspore":
        if plan.request.rank_table != "legacy" or plan.launcher == "msrun":
            raise ConfigError(f"{plan.site.name} writes only the legacy (MindSpore 0.x) rank table "
                              f"{platform.rank_table}", hint="add --rank-table legacy")
        files = ((launch_script_path(plan), npu_script(plan, gpus)),)
        run = f"bash {launch_script_path(plan)} {words}"
        device = next((d for d in platform.device_types if "npu" in d), device)
    elif plan.framework == "none":
        run = words
    else:
        raise ConfigError(f"--framework {plan.framework} is not available on {plan.site.name}",
                          hint="use horovod, mindspore or none on a dlws site")
    form = (("Job Type", "Distributed Job" if plan.nodes > 1 else "Regular Job"), ("Preemptible Job", "NO"),
            ("Device Type", device), ("Number of Nodes", str(plan.nodes)),
            ("Number of Devices per Node", str(gpus)), ("Docker Image", plan.image.value))
    return DlwsJob(form=form, command=f"{run} && sleep infinity", files=files)
