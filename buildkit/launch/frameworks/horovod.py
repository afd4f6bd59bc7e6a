"""Horovod: one task per GPU started by srun with the site's MPI plugin, or horovodrun -H host:slots.

horovodrun runs where Horovod is: on the node (``--runtime none``), or in the image, one task on the first node
(twnia2 has Horovod only in its images). From inside a container it cannot start containers on the other nodes,
so with a container runtime it runs one node; more nodes take ``--launcher srun``.
"""

from __future__ import annotations

from ...errors import ConfigError
from .. import steps
from ..model import LaunchPlan
from ..shell import q
from . import FrameworkBackend, Glue, host_list, node_count


class Horovod(FrameworkBackend):
    name = "horovod"
    summary = "Horovod (srun per GPU with the site's MPI plugin, or horovodrun -H)"
    order = 20
    launchers = ("srun", "horovodrun")
    per_node = ("horovodrun",)
    variables = {"srun": ("CKIT_HOSTS",), "horovodrun": ("CKIT_HOSTS",)}
    reads = {"gloo": ("horovodrun",), "network_interface": ("horovodrun",), "devices_per_node": ("horovodrun",),
             "mpi": ("srun",)}

    def check(self, plan: LaunchPlan) -> None:
        if plan.launcher == "horovodrun" and plan.runtime.kind != "none" and plan.nodes > 1 \
                and plan.site.scheduler == "slurm":
            raise ConfigError(f"horovodrun runs in the image (--runtime {plan.runtime.kind}) and cannot start "
                              f"containers on the other {plan.nodes - 1} node(s)",
                              hint="use --launcher srun (one task per GPU, the site's MPI plugin), or -N 1")

    def copies(self, plan: LaunchPlan) -> tuple[int, str]:
        if plan.launcher != "horovodrun":
            return super().copies(plan)
        slots = plan.request.devices_per_node or max(plan.gpus_per_node, 1)
        return plan.nodes * slots, f"horovodrun starts {slots} per node on {node_count(plan.nodes)}"

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
        if plan.runtime.kind == "none":
            return Glue(setup, names, (" ".join([*run, *steps.program(plan, names, words)]),))
        # in the image, one task on this (the first) node, which holds all its CPUs (one task per node)
        run[run.index('"${CKIT_HOSTS}"')] = f"localhost:{slots}"
        return Glue(setup, names, (steps.srun(plan, names, [*run, *words], options=["--nodes=1", "--ntasks=1"]),))


BACKENDS = (Horovod(),)
