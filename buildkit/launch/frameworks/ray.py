"""Ray: head on the first node, workers on the others, wait until all nodes joined, run the driver, stop."""

from __future__ import annotations

from .. import runtime
from ..plan import LaunchPlan
from ..shell import q
from . import HOST_IP, NODE_LIST, Glue

WAIT = ("import ray, sys, time\n"
        "ray.init(address='auto')\n"
        "want = int(sys.argv[1])\n"
        "for _ in range(300):\n"
        "    if sum(1 for n in ray.nodes() if n['Alive']) >= want: sys.exit(0)\n"
        "    time.sleep(1)\n"
        "sys.exit('ray: not all nodes joined within 300 s')\n")


def glue(plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
    setup = (
        NODE_LIST,
        'export RAY_HEAD="${ckit_nodes[0]}"',
        f'RAY_HEAD_IP=$(srun --nodes=1 --ntasks=1 -w "${{RAY_HEAD}}" sh -c {q(HOST_IP)})',
        'export RAY_HEAD_IP RAY_PORT=6379 RAY_ADDRESS="${RAY_HEAD_IP}:6379"',
    )
    names = (*exports, "RAY_HEAD", "RAY_HEAD_IP", "RAY_PORT", "RAY_ADDRESS")
    one = ["--overlap", "--nodes=1", "--ntasks=1", '-w "${RAY_HEAD}"']
    head = runtime.step(plan, names, ["ray", "start", "--head", '--node-ip-address="${RAY_HEAD_IP}"',
                                      '--port="${RAY_PORT}"', "--block"], options=one)
    workers = runtime.step(plan, names, ["ray", "start", '--address="${RAY_ADDRESS}"', "--block"],
                           options=['--nodes="$((SLURM_JOB_NUM_NODES - 1))"',
                                    '--ntasks="$((SLURM_JOB_NUM_NODES - 1))"', '--exclude="${RAY_HEAD}"'])
    body = (
        f"{head} &",
        "ckit_ray_pids=$!",
        'if [ "${SLURM_JOB_NUM_NODES}" -gt 1 ]; then',
        f"  {workers} &",
        '  ckit_ray_pids="${ckit_ray_pids} $!"',
        "fi",
        runtime.step(plan, names, ["python3", "-c", q(WAIT), '"${SLURM_JOB_NUM_NODES}"'], options=one),
        "ckit_rc=0",
        runtime.step(plan, names, runtime.user_words(plan), options=one) + " || ckit_rc=$?",
        runtime.step(plan, names, ["ray", "stop"], options=one) + " || true",
        "# shellcheck disable=SC2086",
        "kill ${ckit_ray_pids} 2>/dev/null || true",
        'exit "${ckit_rc}"',
    )
    return Glue(setup, names, body)
