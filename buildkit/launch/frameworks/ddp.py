"""PyTorch DDP: MASTER_ADDR/PORT, WORLD_SIZE, RANK, LOCAL_RANK from Slurm; one task per GPU, or torchrun per node."""

from __future__ import annotations

from .. import steps
from ..model import LaunchPlan
from . import JOB_PORT, NODE_LIST, FrameworkBackend, Glue, node_count

PER_TASK = 'export RANK="${SLURM_PROCID}" LOCAL_RANK="${SLURM_LOCALID}" NODE_RANK="${SLURM_NODEID}"; exec "$@"'
# --no_python: the command is the whole program (`python main.py`), not a script torchrun puts python before.
TORCHRUN = ('exec torchrun --no_python --nnodes="${{SLURM_JOB_NUM_NODES}}" --nproc_per_node={procs} '
            '--node_rank="${{SLURM_NODEID}}" --rdzv_id="${{SLURM_JOB_ID}}" --rdzv_backend=c10d '
            '--rdzv_endpoint="${{MASTER_ADDR}}:${{MASTER_PORT}}" "$@"')


def processes_per_node(plan: LaunchPlan) -> int:
    """Processes a per-node launcher starts: --devices-per-node, else one per GPU, else one."""
    return plan.request.devices_per_node or max(plan.gpus_per_node, 1)


class Ddp(FrameworkBackend):
    name = "ddp"
    summary = "PyTorch DistributedDataParallel (MASTER_ADDR/PORT, RANK, WORLD_SIZE)"
    order = 10
    launchers = ("srun", "torchrun")
    per_node = ("torchrun",)
    # torchrun sets its own in the processes it starts (GROUP_RANK is the node's)
    variables = {"srun": ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK"),
                 "torchrun": ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                              "GROUP_RANK")}
    reads = {"devices_per_node": ("torchrun",), "mpi": ("srun",)}

    def copies(self, plan: LaunchPlan) -> tuple[int, str]:
        if plan.launcher != "torchrun":
            return super().copies(plan)
        procs = processes_per_node(plan)
        return plan.nodes * procs, f"torchrun starts {procs} per node on {node_count(plan.nodes)}"

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        setup: tuple[str, ...] = (NODE_LIST, 'export MASTER_ADDR="${ckit_nodes[0]}"', f"export MASTER_PORT={JOB_PORT}")
        names = (*exports, "MASTER_ADDR", "MASTER_PORT")
        words = steps.user_words(plan)
        if plan.launcher == "torchrun":
            # torchrun sets RANK, LOCAL_RANK and WORLD_SIZE for the processes it starts.
            script = TORCHRUN.format(procs=processes_per_node(plan))
            return Glue(setup, names, (steps.srun(plan, names, words, task_script=script),))
        setup += (f'export WORLD_SIZE="${{SLURM_NTASKS:-$((SLURM_JOB_NUM_NODES * {plan.tasks_per_node}))}}"',)
        names += ("WORLD_SIZE",)
        return Glue(setup, names, (steps.srun(plan, names, words, task_script=PER_TASK,
                                              mpi=plan.request.mpi is not None),))


BACKENDS = (Ddp(),)
