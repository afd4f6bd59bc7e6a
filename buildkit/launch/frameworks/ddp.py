"""PyTorch DDP: MASTER_ADDR/PORT, WORLD_SIZE, RANK, LOCAL_RANK from Slurm; one task per GPU or torchrun per node."""

from __future__ import annotations

from .. import runtime
from ..plan import LaunchPlan
from . import JOB_PORT, NODE_LIST, Glue

PER_TASK = 'export RANK="${SLURM_PROCID}" LOCAL_RANK="${SLURM_LOCALID}" NODE_RANK="${SLURM_NODEID}"; exec "$@"'


def glue(plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
    setup: tuple[str, ...] = (NODE_LIST, 'export MASTER_ADDR="${ckit_nodes[0]}"', f"export MASTER_PORT={JOB_PORT}")
    names = (*exports, "MASTER_ADDR", "MASTER_PORT")
    words = runtime.user_words(plan)
    if plan.launcher == "torchrun":
        # torchrun sets RANK, LOCAL_RANK and WORLD_SIZE for the processes it starts.
        script = ('exec torchrun --nnodes="${SLURM_JOB_NUM_NODES}" '
                  f"--nproc_per_node={max(plan.gpus_per_node, 1)} "
                  '--node_rank="${SLURM_NODEID}" --rdzv_id="${SLURM_JOB_ID}" --rdzv_backend=c10d '
                  '--rdzv_endpoint="${MASTER_ADDR}:${MASTER_PORT}" "$@"')
        return Glue(setup, names, (runtime.step(plan, names, words, task_script=script),))
    setup += (f'export WORLD_SIZE="${{SLURM_NTASKS:-$((SLURM_JOB_NUM_NODES * {plan.tasks_per_node}))}}"',)
    names += ("WORLD_SIZE",)
    return Glue(setup, names, (runtime.step(plan, names, words, task_script=PER_TASK),))
