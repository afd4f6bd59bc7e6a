"""Stand-in for a MindSpore program (no Ascend here): reads what MindSpore reads (RANK_ID, DEVICE_ID, RANK_SIZE,
DEVICE_NUM, the rank table) and checks its own entry; writes a file in its own folder (one JSON line)."""

import json
import os
import socket
from pathlib import Path

rank, device = os.environ["RANK_ID"], os.environ["DEVICE_ID"]
table = json.loads(Path(os.environ["RANK_TABLE_FILE"]).read_text())
mine = [d for s in table.get("server_list", []) for d in s["device"] if d["rank_id"] == rank]
mine += [i["devices"][0] for g in table.get("group_list", []) for i in g["instance_list"] if i["rank_id"] == rank]
Path("written-by-rank").write_text(rank)
print("CKIT-RESULT " + json.dumps({
    "rank": int(rank), "device": int(device), "world": int(os.environ["RANK_SIZE"]),
    "device_num": int(os.environ["DEVICE_NUM"]), "host": socket.gethostname(), "cwd": os.getcwd(),
    "table_device": mine[0]["device_id"] if mine else None, "next_to_me": sorted(os.listdir("."))}), flush=True)
