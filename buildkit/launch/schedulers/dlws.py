"""Apulis (DLWorkspace): no sbatch. The job form's fields, its "Command" string and the files the command needs.

The Command is a shell line the platform runs in the container, as in seed 003: arguments may name the
platform's variables and home (``~/tensorboard/${DLWS_JOB_ID}/logs/``), which expand there, never on the
submitting machine; everything else in an argument stays literal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ..frameworks.mindspore import DEVICE_LOOP
from ..model import Image, LaunchPlan
from ..shell import expand_quote, q
from . import Execution, LaunchResult, SchedulerBackend

if TYPE_CHECKING:
    from ...site.model import Site

_EXPANDS = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_])")


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

    def as_json(self) -> dict[str, Any]:
        return {"form": dict(self.form), "command": self.command, "files": dict(self.files)}


def platform_word(arg: str) -> str:
    """One argument of the platform's Command: ``~`` and ``$NAME``/``${NAME}`` expand on the platform."""
    if arg == "~" or arg.startswith("~/"):
        rest = arg[2:]
        return "~/" + (platform_word(rest) if rest else "") if arg != "~" else "~"
    return expand_quote(arg) if _EXPANDS.search(arg) else q(arg)


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
              'export PYTHONPATH="${PYTHONPATH:-}:/usr/local/Ascend/opp/op_impl/built-in/ai_core/tbe:/code"',
              f'export RANK_TABLE_FILE="{platform.rank_table}"', 'export MINDSPORE_HCCL_CONFIG_PATH="${RANK_TABLE_FILE}"',
              f"export DEVICE_NUM={devs}",
              'export RANK_SIZE="$(( ${DLWS_NUM_WORKER:-1} * DEVICE_NUM ))"',
              'export CKIT_RUN_DIR="${HOME}/ckit-runs/${DLWS_JOB_ID}"',
              'export CKIT_NODE_INDEX="${DLWS_ROLE_IDX:-0}"',
              'mkdir -p "${CKIT_RUN_DIR}"', ""]
    return "\n".join(lines) + "\n" + DEVICE_LOOP


class Dlws(SchedulerBackend):
    name = "dlws"
    summary = "a DLWorkspace/Apulis job form and its Command (nothing is submitted)"
    order = 20
    uses_partitions = False
    frameworks = ("none", "horovod", "mindspore")
    preferred_launchers = {"horovod": "horovodrun"}

    def image(self, site: Site, image: Image | None) -> Image | None:
        if image is None:
            raise ConfigError(f"{site.name} runs every job in a Docker image", hint="add --image REF")
        if image.kind == "path":
            raise ConfigError(f"{site.name}'s job form takes a registry image, not the file {image.value}",
                              hint="push it (ckit push FILE REGISTRY/REPO:TAG) and give that reference")
        return Image("ref", image.value) if image.kind == "stack" else image

    def render(self, plan: LaunchPlan) -> DlwsJob:
        platform = plan.site.platform
        if platform is None:
            raise ConfigError(f"{plan.site.name} is not a dlws site")
        assert plan.image is not None
        words = " ".join(platform_word(a) for a in plan.command)
        per_node = max(plan.gpus_per_node, 1)
        files: tuple[tuple[str, str], ...] = ()
        device = next((d for d in platform.device_types if "npu" not in d), "Nvidia")
        if plan.framework == "horovod":
            interface = plan.request.network_interface or platform.network_interface
            run = (f"horovodrun -np {plan.nodes * per_node} -hostfile {platform.hostfile} "
                   f"-p ${platform.ssh_port_var} --network-interface {q(interface)} {words}")
        elif plan.framework == "mindspore":
            per_node = plan.request.devices_per_node or plan.gpus_per_node or 8
            if plan.rank_table != "legacy" or plan.launcher == "msrun":
                raise ConfigError(f"{plan.site.name} writes only the legacy (MindSpore 0.x) rank table "
                                  f"{platform.rank_table}", hint="add --rank-table legacy")
            files = ((launch_script_path(plan), npu_script(plan, per_node)),)
            run = f"bash {launch_script_path(plan)} {words}"
            device = next((d for d in platform.device_types if "npu" in d), device)
        else:
            run = words
        distributed = plan.framework != "none" or plan.nodes > 1
        form = (("Job Type", "Distributed Job" if distributed else "Regular Job"), ("Preemptible Job", "NO"),
                ("Device Type", device), ("Number of Nodes", str(plan.nodes)),
                ("Number of Devices per Node", str(per_node)), ("Docker Image", plan.image.value))
        command = " && ".join([*plan.request.pre, run, "sleep infinity"])
        return DlwsJob(form=form, command=command, files=files)

    def execute(self, plan: LaunchPlan, job: DlwsJob, how: Execution) -> LaunchResult:
        from ..submit import write_script

        result = LaunchResult(plan.site.name, self.name, job.text(), plan.warnings, extra=job.as_json())
        if how.dry_run:
            return result
        folder = how.script or how.cwd / f"{plan.name}-{plan.site.name}"
        result.files = {target: str(write_script(content, folder / Path(target).name))
                        for target, content in job.files}
        return result


BACKENDS = (Dlws(),)


def render_dlws(plan: LaunchPlan) -> DlwsJob:
    return Dlws().render(plan)
