"""Apulis (DLWorkspace): no sbatch. The job form's fields, its "Command" string and the files the command needs.

The Command is a shell line the platform runs in the container, as in seed 003: arguments may name the
platform's variables and home (``~/tensorboard/${DLWS_JOB_ID}/logs/``), which expand there, never on the
submitting machine; everything else in an argument stays literal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from .. import steps, words
from ..frameworks import runs
from ..frameworks.mindspore import DEVICE_LOOP
from ..model import Image, JobVariables, LaunchPlan
from ..shell import q
from . import Execution, LaunchResult, SchedulerBackend

if TYPE_CHECKING:
    from ...site.model import Site



@dataclass(frozen=True)
class DlwsJob:
    form: tuple[tuple[str, str], ...]
    command: str
    files: tuple[tuple[str, str], ...] = ()
    endpoints: tuple[str, ...] = ()
    runs: str = ""
    notes: tuple[str, ...] = ()  # what the user must do that ckit cannot (their own code)

    def text(self) -> str:
        out = [f"{self.runs}.", "Paste into the job form:"] if self.runs else ["Paste into the job form:"]
        out += [f"  {key}: {value}" for key, value in self.form]
        out += ["  Command:", f"    {self.command}"]
        if self.endpoints:
            out += ["After SUBMIT, once the job is Running, its ENDPOINTS tab links each of them "
                    "(SSH: the command to log in to the container)."]
        for note in self.notes:
            out += ["", f"Note: {note}"]
        for path, content in self.files:
            folder = path.rsplit("/", 1)[0]
            out += ["", f"--- file {path}: put it there before submitting, by pasting into a shell on the platform "
                        "(a job's SSH terminal) ---",
                    f'mkdir -p "{folder}" && cat > "{path}" <<\'CKIT_EOF\'', content.rstrip("\n"), "CKIT_EOF"]
        return "\n".join(out) + "\n"

    def as_json(self) -> dict[str, Any]:
        return {"form": dict(self.form), "command": self.command, "files": dict(self.files),
                "endpoints": list(self.endpoints), "notes": list(self.notes)}


def _tilde(rest: tuple[words.Part, ...]) -> str:
    """A leading ``~`` as the platform's shell reads it: ``~/`` unquoted, the rest one word."""
    if not rest:
        return "~"
    first, *more = rest
    assert isinstance(first, str) and first.startswith("/")
    tail = (first[1:], *more) if first[1:] else tuple(more)
    return "~/" + (words.sh_word(tail) if tail else "")


def platform_word(arg: str, variables: JobVariables, what: str = "an argument") -> str:
    """One word of the platform's Command, in ckit's grammar (words.py): ``$NAME``/``${NAME}`` and a leading
    ``~`` expand on the platform, in the container, never on your machine; the rest stays literal."""
    return words.sh_word(words.parse(arg, what, variables), home=_tilde)


def launch_script_path(plan: LaunchPlan) -> str:
    return f"/home/${{DLWS_USER_NAME}}/ckit/{plan.request.name}/launch-npu.sh"


def npu_script(plan: LaunchPlan, devs: int, command: str = '"$@"') -> str:
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
              'mkdir -p "${CKIT_RUN_DIR}"',
              "# the guide's ulimit: eight training processes and their threads per worker",
              'ulimit -u unlimited 2>/dev/null || echo "ckit: ulimit -u unlimited refused; $(ulimit -u) stays" >&2',
              f"set -- {command}", ""]
    return "\n".join(lines) + "\n" + DEVICE_LOOP


ENDPOINTS = {"ssh": "SSH", "jupyter": "Jupyter", "tensorboard": "TensorBoard"}
_NO_SLURM = "the platform has no sbatch"


class Dlws(SchedulerBackend):
    name = "dlws"
    summary = "a DLWorkspace/Apulis job form and its Command (nothing is submitted)"
    order = 20
    uses_partitions = False
    variable_prefixes = ("DLWS_",)
    frameworks = ("none", "horovod", "mindspore")
    preferred_launchers = {"horovod": "horovodrun"}
    no_control = ("ckit writes the Apulis job form and submits nothing there; the platform's web portal lists "
                  "its jobs, shows their logs and stops them")
    cannot = {
        "partition": "the form has no partitions: choose the nodes and devices (-N, --gpus-per-node)",
        "account": "the platform bills no project: drop it",
        "comment": "the form has no comment: drop it",
        "time": "the platform sets no time limit: stop the job in View and Manage Jobs when it is done",
        "tasks_per_node": "each node is one container; horovodrun -np or the device loop starts the processes "
                          "(--gpus-per-node, --devices-per-node)",
        "cpus_per_task": "the form asks for devices, not CPUs: drop it",
        "code": "the platform's containers see only your home and /job: put the code there and bind nothing",
        "mem": "the form asks for devices, not memory: drop it",
        "mem_per_cpu": "the form asks for devices, not memory: drop it",
        "mem_per_gpu": "the form asks for devices, not memory: drop it",
        "mounts": "every container has your home (/home/$DLWS_USER_NAME) and the job's /job folder: "
                  "put the files there",
        "modules": "the job runs in its Docker image, which loads no environment modules: install the software "
                   "in the image (ckit build)",
        "conda": "activate it in the Command: --pre 'source activate ENV'",
        "venv": "activate it in the Command: --pre '. /path/to/venv/bin/activate'",
        "mpi": "horovodrun starts the processes over the platform's SSH, not srun: drop it",
        "output": "the platform keeps the job's output: read it in the job's console tab",
        "error": "the platform keeps the job's output: read it in the job's console tab",
        "mail_type": f"{_NO_SLURM} mail: drop it",
        "mail_user": f"{_NO_SLURM} mail: drop it",
        "array": f"{_NO_SLURM} arrays: submit one job per value",
        "after": f"{_NO_SLURM} dependencies: submit the next job when this one is done",
        "interactive": "tick SSH (--endpoint ssh) and log in to the container from the job's ENDPOINTS tab",
        "fetch": "jobs run in their Docker image: put the data in your home on the platform, or in the image",
    }

    def image(self, site: Site, image: Image | None) -> Image | None:
        if image is None:
            raise ConfigError(f"{site.name} runs every job in a Docker image", hint="add --image REF")
        if image.kind == "path":
            raise ConfigError(f"{site.name}'s job form takes a registry image, not the file {image.value}",
                              hint="push it (ckit push FILE REGISTRY/REPO:TAG) and give that reference")
        return Image("ref", image.value) if image.kind == "stack" else image

    def refusals(self, plan: LaunchPlan) -> list[str]:
        out = super().refusals(plan)
        if plan.framework == "horovod" and plan.launcher != "horovodrun":
            out.append(f"--launcher {plan.launcher}: {plan.site.name} starts Horovod with horovodrun over its "
                       "hostfile; drop --launcher")
        if plan.framework == "mindspore" and (plan.rank_table != "legacy" or plan.launcher == "msrun"):
            out.append(f"{plan.site.name} writes only the legacy (MindSpore 0.x) rank table "
                       f"{plan.site.platform.rank_table if plan.site.platform else ''}: add --rank-table legacy "
                       "and drop --launcher msrun")
        return out

    def render(self, plan: LaunchPlan) -> DlwsJob:
        platform = plan.site.platform
        if platform is None:
            raise ConfigError(f"{plan.site.name} is not a dlws site")
        assert plan.image is not None
        argv = " ".join(platform_word(a, plan.variables, f"argument {i + 1} of the command")
                        for i, a in enumerate(plan.command))
        per_node = plan.request.devices_per_node or max(plan.gpus_per_node, 1)
        files: tuple[tuple[str, str], ...] = ()
        device = next((d for d in platform.device_types if "npu" not in d), "Nvidia")
        if plan.framework == "horovod":
            interface = plan.request.network_interface or platform.network_interface
            gloo = "--gloo " if plan.request.gloo else ""
            run = (f"horovodrun {gloo}-np {plan.nodes * per_node} -hostfile {platform.hostfile} "
                   f"-p ${platform.ssh_port_var} --network-interface {q(interface)} {argv}")
        elif plan.framework == "mindspore":
            per_node = plan.request.devices_per_node or plan.gpus_per_node or 8
            # the command is the script's: arguments naming DEVICE_NUM, RANK_ID… are read by each process it
            # starts, not by the platform's shell, which runs the Command before the script has set them
            inner = " ".join(steps.command_words(plan.command, plan.variables))
            files = ((launch_script_path(plan), npu_script(plan, per_node, inner)),)
            run = f"bash {launch_script_path(plan)}"
            device = next((d for d in platform.device_types if "npu" in d), device)
        else:
            run = argv
        distributed = plan.framework != "none" or plan.nodes > 1
        form: tuple[tuple[str, str], ...] = (("Job Name", plan.name), ("Job Type", "Distributed Job" if distributed else "Regular Job"),
                ("Preemptible Job", "NO"), ("Device Type", device), ("Number of Nodes", str(plan.nodes)),
                ("Number of Devices per Node", str(per_node)), ("Docker Image", plan.image.value))
        endpoints = tuple(ENDPOINTS[e] for e in plan.request.endpoints)
        if endpoints:
            form += (("Endpoints (tick)", ", ".join(endpoints)),)
        command = " && ".join([*_before(plan), run, "sleep infinity"])
        if plan.framework == "mindspore":  # the guide's: the NPUs are root's; -E keeps the job's environment
            command = f"sudo -E bash -c {q(command)}"
        return DlwsJob(form=form, command=command, files=files, endpoints=endpoints, runs=runs(plan),
                       notes=_notes(plan))

    def execute(self, plan: LaunchPlan, job: DlwsJob, how: Execution) -> LaunchResult:
        from ..submit import write_script

        result = LaunchResult(plan.site.name, self.name, job.text(), plan.warnings, extra=job.as_json(),
                              runs=job.runs)
        if how.dry_run:
            return result
        folder = how.script or how.cwd / f"{plan.name}-{plan.site.name}"
        result.files = {target: str(write_script(content, folder / Path(target).name))
                        for target, content in job.files}
        return result


def _notes(plan: LaunchPlan) -> tuple[str, ...]:
    if plan.framework != "mindspore":
        return ()
    return ("MindSpore 0.3's resnet50 example reads DEVICE_NUM for its world size (config.py line 42); on more than "
            "one worker the guide changes it to read RANK_SIZE, which the launch script sets to workers x devices: "
            "change `os.getenv(\"DEVICE_NUM\")` to `os.getenv(\"RANK_SIZE\")` in your code, ckit cannot.",)


def _before(plan: LaunchPlan) -> list[str]:
    """The Command's first steps: the --env values (read on the platform, in ckit's grammar), --workdir, --pre."""
    plain, per_task = steps.job_env(plan)
    lines = [f"export {name}={q(value)}" for name, value in plain]
    lines += [f"export {name}={words.sh_word(parts, home=_tilde)}" for name, parts in per_task]
    if plan.request.workdir:
        lines.append(f"cd {q(plan.request.workdir)}")
    return [*lines, *plan.request.pre]


BACKENDS = (Dlws(),)


def render_dlws(plan: LaunchPlan) -> DlwsJob:
    return Dlws().render(plan)
