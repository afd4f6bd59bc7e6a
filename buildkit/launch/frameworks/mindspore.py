"""MindSpore on Ascend: an HCCL rank table built inside the job (v1.0 server_list, or the legacy 0.x format of
seed 003), then per node one process per device with DEVICE_ID/RANK_ID/RANK_SIZE/DEVICE_NUM, each in its own
folder, and a trap that stops them all; or ``msrun`` (MindSpore >= 2.3).

The per-node scripts are written into the job's run folder (``$SLURM_SUBMIT_DIR/ckit-$SLURM_JOB_ID``, visible
in the container like the submit folder) as plain files a person can read and rerun.
"""

from __future__ import annotations

from typing import Any

from ...outside import ascii_int
from .. import steps
from ..model import LaunchPlan
from . import JOB_PORT, NODE_LIST, RUN_DIR, FrameworkBackend, Glue, heredoc, node_count

DEVICE_LOOP = r"""# One process per device on this node, each in its own folder with its env.log (seed 003's
# run_distribute_train.sh):
# DEVICE_ID and RANK_ID per process. The start folder's files are linked into each folder, so
# `python train.py` is found there, and what a process writes stays in its own folder.
# A signal stops them all; the exit code is the first failure's.
start="$PWD"
node="${CKIT_NODE_INDEX:-${SLURM_NODEID:-0}}"
pids=""
trap 'trap - TERM INT; kill $pids 2>/dev/null; wait' TERM INT
i=0
while [ "$i" -lt "$DEVICE_NUM" ]; do
    DEVICE_ID="$i"
    RANK_ID=$((node * DEVICE_NUM + i))
    export DEVICE_ID RANK_ID
    dir="$CKIT_RUN_DIR/rank$RANK_ID"
    mkdir -p "$dir"
    for entry in "$start"/*; do
        if [ -e "$entry" ] && ! [ "$entry" -ef "$CKIT_RUN_DIR" ]; then
            ln -sfn "$entry" "$dir/"
        fi
    done
    (cd "$dir" && env > env.log && exec "$@") &
    pids="$pids $!"
    i=$((i + 1))
done
rc=0
for pid in $pids; do
    wait "$pid" || rc=$?
done
exit "$rc"
"""

Q = '"'
_DEVICE = {
    "v1": """'{"device_id": "%s", "device_ip": "%s", "rank_id": "%s"}' "$i" "$dip" "$rank""" + Q,
    "legacy": """'{"devices": [{"device_id": "%s", "device_ip": "%s"}], "rank_id": "%s", "server_id": "%s"}' """
              """"$i" "$dip" "$rank" "$ip""" + Q,
}
_SERVER = {
    "v1": """printf '{"server_id": "%s", "device": [%s], "host_nic_ip": "reserve"}\\n' "$ip" "$devs""" + Q,
    "legacy": """printf '%s\\n' "$devs""" + Q,
}
_TABLE = {
    "v1": """printf '{"version": "1.0", "server_count": "%s", "server_list": [%s], "status": "completed"}\\n' \\
  "${SLURM_JOB_NUM_NODES}" "${ckit_parts}" > "${RANK_TABLE_FILE}""" + Q,
    "legacy": """printf '{"board_id": "0x0020", "chip_info": "910", "deploy_mode": "lab", "group_count": "1", '\\
'"group_list": [{"device_num": "%s", "server_num": "%s", "group_name": "", "instance_count": "%s", '\\
'"instance_list": [%s]}], "para_plane_nic_location": "device", "para_plane_nic_name": [%s], '\\
'"para_plane_nic_num": "%s", "status": "completed"}\\n' "${RANK_SIZE}" "${SLURM_JOB_NUM_NODES}" "${RANK_SIZE}" \\
  "${ckit_parts}" "${ckit_nics}" "${DEVICE_NUM}" > "${RANK_TABLE_FILE}""" + Q,
}


def server_script(fmt: str) -> str:
    """Per node: this server's part of the rank table, from the device IPs in hccn.conf (address_<i>=IP)."""
    return "\n".join([
        "# This server's part of the HCCL rank table: its address and the device IPs listed in hccn.conf.",
        'hccn="${CKIT_HCCN_CONF:-/etc/hccn.conf}"',
        'ip=$(hostname -I 2>/dev/null | cut -d " " -f 1)',
        'if [ -z "$ip" ]; then ip=$(hostname -i | cut -d " " -f 1); fi',
        'devs=""',
        "i=0",
        'while [ "$i" -lt "$DEVICE_NUM" ]; do',
        '    dip=$(sed -n "s/^address_$i=//p" "$hccn" | head -n 1)',
        '    if [ -z "$dip" ]; then',
        '        echo "ckit: no address_$i in $hccn" >&2',
        "        exit 1",
        "    fi",
        "    rank=$((SLURM_NODEID * DEVICE_NUM + i))",
        f'    devs="$devs${{devs:+, }}$(printf {_DEVICE[fmt]})"',
        "    i=$((i + 1))",
        "done",
        f'{_SERVER[fmt]} > "$CKIT_RUN_DIR/server-$SLURM_NODEID.json"',
    ]) + "\n"


def assemble_lines(fmt: str) -> tuple[str, ...]:
    """In the batch script: join the servers' parts into the rank table (server order = node order)."""
    lines = ['ckit_parts=""',
             "for ((ckit_n = 0; ckit_n < SLURM_JOB_NUM_NODES; ckit_n++)); do",
             '  ckit_parts+="${ckit_parts:+, }$(cat "${CKIT_RUN_DIR}/server-${ckit_n}.json")"',
             "done"]
    if fmt == "legacy":
        lines += ['ckit_nics=""',
                  "for ((ckit_n = 0; ckit_n < DEVICE_NUM; ckit_n++)); do",
                  '  ckit_nics+="${ckit_nics:+, }\\"eth${ckit_n}\\""',
                  "done"]
    return (*lines, _TABLE[fmt])


def devices(plan: LaunchPlan) -> int:
    return plan.request.devices_per_node or plan.gpus_per_node or 1


class MindSpore(FrameworkBackend):
    name = "mindspore"
    summary = "MindSpore on Ascend (HCCL rank table + one process per device, or msrun)"
    order = 40
    launchers = ("rank-table", "msrun")
    per_node = ("rank-table", "msrun")
    variables = {"rank-table": ("CKIT_RUN_DIR", "RANK_TABLE_FILE", "MINDSPORE_HCCL_CONFIG_PATH", "DEVICE_NUM",
                                "RANK_SIZE", "DEVICE_ID", "RANK_ID"),
                 "msrun": ("CKIT_RUN_DIR", "MASTER_ADDR", "MASTER_PORT")}
    reads = {"devices_per_node": ("rank-table", "msrun"), "rank_table": ("rank-table",)}

    def copies(self, plan: LaunchPlan) -> tuple[int, str]:
        who = "msrun starts" if plan.launcher == "msrun" else "one per device,"
        return plan.nodes * devices(plan), f"{who} {devices(plan)} per node on {node_count(plan.nodes)}"

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        devs = devices(plan)
        per_node = ["--ntasks-per-node=1"]
        words = steps.user_words(plan)
        if plan.launcher == "msrun":
            setup: tuple[str, ...] = (NODE_LIST, *RUN_DIR, 'export MASTER_ADDR="${ckit_nodes[0]}"', f"export MASTER_PORT={JOB_PORT}")
            names = (*exports, "CKIT_RUN_DIR", "MASTER_ADDR", "MASTER_PORT")
            script = (f'exec msrun --worker_num="$((SLURM_JOB_NUM_NODES * {devs}))" --local_worker_num={devs} '
                      '--master_addr="${MASTER_ADDR}" --master_port="${MASTER_PORT}" --node_rank="${SLURM_NODEID}" '
                      '--log_dir="${CKIT_RUN_DIR}/msrun_log" --join=True --cluster_time_out=600 "$@"')
            return Glue(setup, names, (steps.srun(plan, names, words, task_script=script, options=per_node),))
        setup = (
            *RUN_DIR,
            'export RANK_TABLE_FILE="${CKIT_RUN_DIR}/rank_table.json"',
            'export MINDSPORE_HCCL_CONFIG_PATH="${RANK_TABLE_FILE}"',
            f"export DEVICE_NUM={devs}",
            'export RANK_SIZE="$((SLURM_JOB_NUM_NODES * DEVICE_NUM))"',
            *heredoc("${CKIT_RUN_DIR}/server.sh", server_script(plan.rank_table)),
            *heredoc("${CKIT_RUN_DIR}/devices.sh", DEVICE_LOOP),
            'srun --export=ALL --ntasks-per-node=1 sh "${CKIT_RUN_DIR}/server.sh"',
            *assemble_lines(plan.rank_table),
        )
        names = (*exports, "CKIT_RUN_DIR", "RANK_TABLE_FILE", "MINDSPORE_HCCL_CONFIG_PATH", "DEVICE_NUM", "RANK_SIZE")
        body = steps.srun(plan, names, ["sh", '"${CKIT_RUN_DIR}/devices.sh"', *words], options=per_node)
        return Glue(setup, names, (body,))


BACKENDS = (MindSpore(),)


def rank_table_problems(table: dict[str, Any], *, servers: int, devices: int) -> list[str]:
    """What is wrong with a v1.0 rank table (server_list form) for ``servers`` × ``devices`` (empty when valid)."""
    problems = []
    if table.get("version") != "1.0" or table.get("status") != "completed":
        problems.append("version must be '1.0' and status 'completed'")
    server_list = table.get("server_list", [])
    if table.get("server_count") != str(servers) or len(server_list) != servers:
        problems.append(f"server_count must be '{servers}' with {servers} entries in server_list")
    ranks = []
    for server in server_list:
        if not server.get("server_id") or server.get("host_nic_ip") != "reserve":
            problems.append(f"server entry needs server_id and host_nic_ip 'reserve': {server}")
        device_list = server.get("device", [])
        if [d.get("device_id") for d in device_list] != [str(i) for i in range(devices)]:
            problems.append(f"server {server.get('server_id')} must list device_id 0..{devices - 1} in order")
        for device in device_list:
            if not device.get("device_ip") or ascii_int(str(device.get("rank_id", ""))) is None:
                problems.append(f"device entry needs device_ip and a numeric rank_id: {device}")
            ranks.append(device.get("rank_id"))
    if ranks != [str(r) for r in range(servers * devices)]:
        problems.append(f"rank_id must run 0..{servers * devices - 1} in server order, got {ranks}")
    return problems


def legacy_rank_table_problems(table: dict[str, Any], *, servers: int, devices: int) -> list[str]:
    """What is wrong with a legacy (MindSpore 0.x, seed 003) rank table (empty when valid)."""
    problems = []
    fixed = {"board_id": "0x0020", "chip_info": "910", "deploy_mode": "lab", "group_count": "1",
             "para_plane_nic_location": "device", "para_plane_nic_num": str(devices), "status": "completed"}
    problems += [f"{key} must be {value!r}" for key, value in fixed.items() if table.get(key) != value]
    if table.get("para_plane_nic_name") != [f"eth{i}" for i in range(devices)]:
        problems.append(f"para_plane_nic_name must be eth0..eth{devices - 1}")
    groups = table.get("group_list", [])
    if len(groups) != 1:
        return [*problems, "group_list must hold one group"]
    group, total = groups[0], servers * devices
    if (group.get("device_num"), group.get("server_num"), group.get("instance_count")) != \
            (str(total), str(servers), str(total)):
        problems.append(f"device_num/instance_count must be '{total}' and server_num '{servers}'")
    instances = group.get("instance_list", [])
    if [i.get("rank_id") for i in instances] != [str(r) for r in range(total)]:
        problems.append(f"rank_id must run 0..{total - 1}")
    for index, instance in enumerate(instances):
        devs = instance.get("devices", [])
        if len(devs) != 1 or devs[0].get("device_id") != str(index % devices) or not devs[0].get("device_ip") \
                or not instance.get("server_id"):
            problems.append(f"instance {index} needs one device {index % devices} with device_ip, and server_id")
    return problems
