"""The Ray driver: it must see both nodes' resources and run a task on each (one JSON line). With ``--guide`` it
connects as seed 001's tune script does, from NERSC's variables ``ip_head`` and ``redis_password``."""

import json
import os
import socket
import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

if "--guide" in sys.argv:
    ray.init(address="auto", _node_ip_address=os.environ["ip_head"].split(":")[0],  # noqa: SIM112 - the guide's names
             _redis_password=os.environ["redis_password"])  # noqa: SIM112
else:
    ray.init(address="auto")
nodes = [n for n in ray.nodes() if n["Alive"]]


@ray.remote(num_cpus=0)
def where() -> str:
    return socket.gethostname()


hosts = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                 for n in nodes])
print("CKIT-RESULT " + json.dumps({
    "nodes": len(nodes), "addresses": sorted(n["NodeManagerAddress"] for n in nodes),
    "cpus": ray.cluster_resources().get("CPU"), "task_hosts": sorted(hosts), "driver": socket.gethostname(),
    "ip_head": os.environ.get("ip_head")}), flush=True)  # noqa: SIM112
