"""Distributed-training glue per framework, computed inside the job from Slurm's variables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..plan import LaunchPlan


@dataclass(frozen=True)
class Glue:
    """Batch-level setup lines, the variables they export (passed into containers) and the lines that run the job."""

    setup: tuple[str, ...]
    exports: tuple[str, ...]
    body: tuple[str, ...]


NODE_LIST = 'mapfile -t ckit_nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")'
# A port derived from the job id: different for concurrent jobs, below the Linux ephemeral range (32768+).
JOB_PORT = "$((15000 + SLURM_JOB_ID % 15000))"
# This node's first non-loopback address (hostname -i can give 127.0.1.1 on Debian-style hosts).
SET_HOST_IP = "ip=$(hostname -I 2>/dev/null | cut -d ' ' -f 1); [ -n \"$ip\" ] || ip=$(hostname -i | cut -d ' ' -f 1)"
HOST_IP = SET_HOST_IP + '; echo "$ip"'
HOST_LIST = ('CKIT_HOSTS=$(printf "%s:{slots}," "${{ckit_nodes[@]}}")', 'export CKIT_HOSTS="${CKIT_HOSTS%,}"')


def host_list(slots: int) -> tuple[str, ...]:
    """``CKIT_HOSTS=node1:slots,node2:slots`` from the allocation (horovodrun -H)."""
    return (NODE_LIST, HOST_LIST[0].format(slots=slots), HOST_LIST[1])


def glue_for(plan: LaunchPlan, site_exports: tuple[str, ...]) -> Glue:
    from . import ddp, horovod, mindspore, nccl_tests, none, ray, tf

    table: dict[str, Callable[[LaunchPlan, tuple[str, ...]], Glue]] = {
        "none": none.glue, "horovod": horovod.glue, "ddp": ddp.glue, "tf": tf.glue,
        "mindspore": mindspore.glue, "ray": ray.glue, "nccl-tests": nccl_tests.glue,
    }
    return table[plan.framework](plan, site_exports)
