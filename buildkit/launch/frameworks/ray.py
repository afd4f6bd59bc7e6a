"""Ray: head on the first node, workers on the others, wait until all nodes joined, run the driver, stop.

The steps on the head's node after the head start once the head's port answers there (the batch shell runs on
that node): in Pyxis they then share the head's container, whose /tmp holds Ray's sockets.

The head's port derives from the job id (20000-29999: above Ray's worker ports 10002-19999, below the
ephemeral range), so two Ray jobs sharing a node do not collide. Besides RAY_ADDRESS, the variables of NERSC's
slurm-ray-cluster scripts (seed 001's tune example reads them): ``ip_head`` (the head's address) and
``redis_password`` (Ray's default one: ckit's ``ray start`` sets none, and Ray 2 no longer asks for it). The wait
gives up (and the job fails) when the head does not answer within a minute or not every node joined within five.
"""

from __future__ import annotations

from .. import steps
from ..model import LaunchPlan
from ..shell import q
from . import HOST_IP, NODE_LIST, RUN_DIR, FrameworkBackend, Glue, heredoc, node_count

# Written into the job's run folder (a file a person can read and rerun), run on the head's node.
WAIT = """\
# Wait until Ray's head answers, then until every node of the job joined the cluster.
import os
import socket
import sys
import time

host, port = os.environ["RAY_ADDRESS"].rsplit(":", 1)
for _ in range(60):
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        break
    except OSError:
        time.sleep(1)
else:
    sys.exit(f"ray: no head at {host}:{port} within 60 s")
import ray

ray.init(address="auto")
want = int(sys.argv[1])
for _ in range(300):
    if sum(1 for n in ray.nodes() if n["Alive"]) >= want:
        sys.exit(0)
    time.sleep(1)
sys.exit("ray: not all nodes joined within 300 s")
"""
REDIS_DEFAULT_PASSWORD = "5241590000000000"  # ray_constants.REDIS_DEFAULT_PASSWORD, what ray start uses
RAY_PORT = "$((20000 + SLURM_JOB_ID % 10000))"
# The batch shell runs on the head's node: the steps that talk to the head start once it answers there. A Pyxis
# step joins a named container's namespaces (and its /tmp, which holds Ray's sockets) only while the container
# runs; started earlier, the driver got a container of its own and Ray's client found no raylet socket.
HEAD_UP = (
    "for _ in $(seq 60); do  # the head's port, from this node",
    '  if (exec 3<>"/dev/tcp/${RAY_HEAD_IP}/${RAY_PORT}") 2>/dev/null; then break; fi',
    "  sleep 1",
    "done",
)


class Ray(FrameworkBackend):
    name = "ray"
    summary = "a Ray cluster (head + workers) for the driver command"
    order = 50
    per_node = (None,)
    variables = {None: ("RAY_HEAD", "RAY_HEAD_IP", "RAY_PORT", "RAY_ADDRESS", "ip_head", "redis_password",
                        "CKIT_RUN_DIR")}

    def copies(self, plan: LaunchPlan) -> tuple[int, str]:
        return 1, f"the driver, on the head's node, with a Ray cluster on {node_count(plan.nodes)}"

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        setup = (
            NODE_LIST,
            'export RAY_HEAD="${ckit_nodes[0]}"',
            f'RAY_HEAD_IP=$(srun --export=ALL --nodes=1 --ntasks=1 -w "${{RAY_HEAD}}" sh -c {q(HOST_IP)})',
            f'export RAY_HEAD_IP RAY_PORT={RAY_PORT}',
            'export RAY_ADDRESS="${RAY_HEAD_IP}:${RAY_PORT}"',
            "# the names of NERSC's slurm-ray-cluster scripts, which seed 001's examples read",
            f'export ip_head="${{RAY_ADDRESS}}" redis_password={REDIS_DEFAULT_PASSWORD}',
            *RUN_DIR,
            *heredoc("${CKIT_RUN_DIR}/ray_wait.py", WAIT),
        )
        names = (*exports, "RAY_HEAD", "RAY_HEAD_IP", "RAY_PORT", "RAY_ADDRESS", "ip_head", "redis_password",
                 "CKIT_RUN_DIR")
        one = ["--overlap", "--nodes=1", "--ntasks=1", '-w "${RAY_HEAD}"']
        head = steps.srun(plan, names, ["ray", "start", "--head", '--node-ip-address="${RAY_HEAD_IP}"',
                                        '--port="${RAY_PORT}"', "--block"], options=one)
        workers = steps.srun(plan, names, ["ray", "start", '--address="${RAY_ADDRESS}"', "--block"],
                             options=['--nodes="$((SLURM_JOB_NUM_NODES - 1))"',
                                      '--ntasks="$((SLURM_JOB_NUM_NODES - 1))"', '--exclude="${RAY_HEAD}"'])
        body = (
            f"{head} &",
            "ckit_ray_pids=$!",
            'if [ "${SLURM_JOB_NUM_NODES}" -gt 1 ]; then',
            f"  {workers} &",
            '  ckit_ray_pids="${ckit_ray_pids} $!"',
            "fi",
            *HEAD_UP,
            steps.srun(plan, names, ["python3", '"${CKIT_RUN_DIR}/ray_wait.py"', '"${SLURM_JOB_NUM_NODES}"'],
                       options=[*one, "--time=7"]),
            "ckit_rc=0",
            steps.srun(plan, names, steps.user_words(plan), options=one) + " || ckit_rc=$?",
            steps.srun(plan, names, ["ray", "stop"], options=one) + " || true",
            "# shellcheck disable=SC2086",
            "kill ${ckit_ray_pids} 2>/dev/null || true",
            'exit "${ckit_rc}"',
        )
        return Glue(setup, names, body)


BACKENDS = (Ray(),)
