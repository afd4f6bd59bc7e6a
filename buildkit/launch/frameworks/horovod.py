"""Horovod: one task per GPU started by srun with the site's MPI plugin, or horovodrun -H host:slots."""

from __future__ import annotations

from .. import steps
from ..model import LaunchPlan
from ..shell import q
from . import FrameworkBackend, Glue, host_list


class Horovod(FrameworkBackend):
    name = "horovod"
    summary = "Horovod (srun per GPU with the site's MPI plugin, or horovodrun -H)"
    order = 20
    launchers = ("srun", "horovodrun")
    per_node = ("horovodrun",)

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        per_node = plan.request.devices_per_node or max(plan.gpus_per_node, 1)
        slots = per_node if plan.launcher == "horovodrun" else plan.tasks_per_node
        setup = host_list(slots)
        names = (*exports, "CKIT_HOSTS")
        words = steps.user_words(plan)
        if plan.launcher != "horovodrun":
            return Glue(setup, names, (steps.srun(plan, names, words, mpi=True),))
        run = ["horovodrun", "-np", f"$((SLURM_JOB_NUM_NODES * {slots}))", "-H", '"${CKIT_HOSTS}"']
        interface = plan.request.network_interface or (plan.site.network_interface if plan.request.gloo else None)
        if plan.request.gloo:
            run.append("--gloo")
        if interface:
            run += ["--network-interface", q(interface)]
        return Glue(setup, names, (" ".join([*run, *steps.program(plan, names, words)]),))


BACKENDS = (Horovod(),)
