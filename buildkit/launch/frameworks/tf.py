"""TensorFlow MultiWorkerMirroredStrategy: TF_CONFIG per worker from the node list, index from SLURM_PROCID."""

from __future__ import annotations

from .. import steps
from ..model import LaunchPlan
from . import JOB_PORT, NODE_LIST, FrameworkBackend, Glue

PER_TASK = ('export TF_CONFIG="{\\"cluster\\": {\\"worker\\": ${CKIT_TF_WORKERS}}, '
            '\\"task\\": {\\"type\\": \\"worker\\", \\"index\\": ${SLURM_PROCID}}}"; exec "$@"')


class TensorFlow(FrameworkBackend):
    name = "tf"
    summary = "TensorFlow MultiWorkerMirroredStrategy (TF_CONFIG per worker)"
    order = 30
    per_node = (None,)
    variables = {None: ("TF_CONFIG", "CKIT_TF_WORKERS")}
    reads = {"mpi": (None,)}

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        setup = (
            NODE_LIST,
            f"ckit_port={JOB_PORT}",
            'ckit_workers=""',
            'for ckit_node in "${ckit_nodes[@]}"; do',
            f"  for ((ckit_i = 0; ckit_i < {plan.tasks_per_node}; ckit_i++)); do",
            '    ckit_workers+="${ckit_workers:+, }\\"${ckit_node}:$((ckit_port + ckit_i))\\""',
            "  done",
            "done",
            'export CKIT_TF_WORKERS="[${ckit_workers}]"',
        )
        names = (*exports, "CKIT_TF_WORKERS")
        return Glue(setup, names, (steps.srun(plan, names, steps.user_words(plan), task_script=PER_TASK,
                                              mpi=plan.request.mpi is not None),))


BACKENDS = (TensorFlow(),)
