"""MindSpore on Ascend: an HCCL rank table built inside the job (v1.0 server_list, or the legacy 0.x format of
seed 003), then per node one process per device with DEVICE_ID/RANK_ID/RANK_SIZE, separate work dirs and a trap
that stops every device process; or ``msrun`` (MindSpore >= 2.3)."""

from __future__ import annotations

from .. import runtime
from ..plan import LaunchPlan
from ..shell import q
from . import JOB_PORT, NODE_LIST, SET_HOST_IP, Glue


def devices(plan: LaunchPlan) -> int:
    return plan.request.devices_per_node or plan.gpus_per_node or 1


def server_script(devs: int, legacy: bool) -> str:
    """Per node: this server's part of the rank table, from the device IPs in hccn.conf (address_<i>=IP)."""
    if legacy:
        item = ('{\\"devices\\": [{\\"device_id\\": \\"$i\\", \\"device_ip\\": \\"$dip\\"}], '
                '\\"rank_id\\": \\"$rank\\", \\"server_id\\": \\"$ip\\"}')
        done = 'printf "%s\\n" "$devs"'
    else:
        item = '{\\"device_id\\": \\"$i\\", \\"device_ip\\": \\"$dip\\", \\"rank_id\\": \\"$rank\\"}'
        done = 'printf "{\\"server_id\\": \\"%s\\", \\"device\\": [%s], \\"host_nic_ip\\": \\"reserve\\"}\\n" "$ip" "$devs"'
    return "; ".join([
        'hccn="${CKIT_HCCN_CONF:-/etc/hccn.conf}"',
        SET_HOST_IP,
        'devs=""',
        "i=0",
        f'while [ "$i" -lt {devs} ]; do dip=$(sed -n "s/^address_$i=//p" "$hccn" | head -n 1)',
        '[ -n "$dip" ] || { echo "ckit: no address_$i in $hccn" >&2; exit 1; }',
        f"rank=$((SLURM_NODEID * {devs} + i))",
        f'devs="$devs${{devs:+, }}{item}"',
        "i=$((i + 1)); done",
        f'{done} > "$CKIT_RUN_DIR/server-$SLURM_NODEID.json"',
    ])


def assemble_lines(devs: int, legacy: bool) -> tuple[str, ...]:
    """In the batch script: join the servers' parts into the rank table (server order = node order)."""
    join = ('ckit_parts=""',
            'for ((ckit_n = 0; ckit_n < SLURM_JOB_NUM_NODES; ckit_n++)); do',
            '  ckit_parts+="${ckit_parts:+, }$(cat "${CKIT_RUN_DIR}/server-${ckit_n}.json")"',
            "done")
    if legacy:
        nics = ", ".join(f'\\"eth{i}\\"' for i in range(devs))
        table = ('printf "{\\"board_id\\": \\"0x0020\\", \\"chip_info\\": \\"910\\", \\"deploy_mode\\": \\"lab\\", '
                 '\\"group_count\\": \\"1\\", \\"group_list\\": [{\\"device_num\\": \\"%s\\", \\"server_num\\": \\"%s\\", '
                 '\\"group_name\\": \\"\\", \\"instance_count\\": \\"%s\\", \\"instance_list\\": [%s]}], '
                 '\\"para_plane_nic_location\\": \\"device\\", '
                 f'\\"para_plane_nic_name\\": [{nics}], \\"para_plane_nic_num\\": \\"{devs}\\", '
                 '\\"status\\": \\"completed\\"}\\n" "${RANK_SIZE}" "${SLURM_JOB_NUM_NODES}" "${RANK_SIZE}" '
                 '"${ckit_parts}" > "${RANK_TABLE_FILE}"')
    else:
        table = ('printf "{\\"version\\": \\"1.0\\", \\"server_count\\": \\"%s\\", \\"server_list\\": [%s], '
                 '\\"status\\": \\"completed\\"}\\n" "${SLURM_JOB_NUM_NODES}" "${ckit_parts}" > "${RANK_TABLE_FILE}"')
    return (*join, table)


def device_loop(devs: int, node_index: str = "$SLURM_NODEID") -> str:
    """Per node: one process per device, each in its own work dir; a signal stops them all (seed 003's trap)."""
    return "; ".join([
        "pids=''",
        "trap 'trap - TERM INT; kill $pids 2>/dev/null; wait' TERM INT",
        "i=0",
        f'while [ "$i" -lt {devs} ]; do export DEVICE_ID="$i" RANK_ID="$(({node_index} * {devs} + i))"',
        'mkdir -p "$CKIT_RUN_DIR/rank$RANK_ID"',
        '(cd "$CKIT_RUN_DIR/rank$RANK_ID" && exec "$@") & pids="$pids $!"',
        "i=$((i + 1)); done",
        "rc=0; for pid in $pids; do wait \"$pid\" || rc=$?; done; exit \"$rc\"",
    ])


def glue(plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
    devs = devices(plan)
    run_dir = ['export CKIT_RUN_DIR="${SLURM_SUBMIT_DIR}/ckit-${SLURM_JOB_ID}"', 'mkdir -p "${CKIT_RUN_DIR}"']
    per_node = ["--ntasks-per-node=1"]
    words = runtime.user_words(plan)
    if plan.launcher == "msrun":
        setup = (NODE_LIST, *run_dir, 'export MASTER_ADDR="${ckit_nodes[0]}"', f"export MASTER_PORT={JOB_PORT}")
        names = (*exports, "CKIT_RUN_DIR", "MASTER_ADDR", "MASTER_PORT")
        script = (f'exec msrun --worker_num="$((SLURM_JOB_NUM_NODES * {devs}))" --local_worker_num={devs} '
                  '--master_addr="${MASTER_ADDR}" --master_port="${MASTER_PORT}" --node_rank="${SLURM_NODEID}" '
                  '--log_dir="${CKIT_RUN_DIR}/msrun_log" --join=True --cluster_time_out=600 "$@"')
        return Glue(setup, names, (runtime.step(plan, names, words, task_script=script, options=per_node),))
    legacy = plan.request.rank_table == "legacy"
    setup = (
        *run_dir,
        'export RANK_TABLE_FILE="${CKIT_RUN_DIR}/rank_table.json"',
        'export MINDSPORE_HCCL_CONFIG_PATH="${RANK_TABLE_FILE}"',
        f'export RANK_SIZE="$((SLURM_JOB_NUM_NODES * {devs}))"',
        f"srun --ntasks-per-node=1 sh -c {q(server_script(devs, legacy))}",
        *assemble_lines(devs, legacy),
    )
    names = (*exports, "CKIT_RUN_DIR", "RANK_TABLE_FILE", "MINDSPORE_HCCL_CONFIG_PATH", "RANK_SIZE")
    return Glue(setup, names, (runtime.step(plan, names, words, task_script=device_loop(devs), options=per_node),))


def rank_table_problems(table: dict, *, servers: int, devices: int) -> list[str]:  # type: ignore[type-arg]
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
            if not device.get("device_ip") or not str(device.get("rank_id", "")).isdigit():
                problems.append(f"device entry needs device_ip and a numeric rank_id: {device}")
            ranks.append(device.get("rank_id"))
    if ranks != [str(r) for r in range(servers * devices)]:
        problems.append(f"rank_id must run 0..{servers * devices - 1} in server order, got {ranks}")
    return problems


def legacy_rank_table_problems(table: dict, *, servers: int, devices: int) -> list[str]:  # type: ignore[type-arg]
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
