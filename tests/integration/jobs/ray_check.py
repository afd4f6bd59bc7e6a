"""The Ray driver: it must see both nodes' resources and run a task on each (one JSON line)."""

import json
import socket

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address="auto")
nodes = [n for n in ray.nodes() if n["Alive"]]


@ray.remote(num_cpus=0)
def where() -> str:
    return socket.gethostname()


hosts = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                 for n in nodes])
print("CKIT-RESULT " + json.dumps({
    "nodes": len(nodes), "addresses": sorted(n["NodeManagerAddress"] for n in nodes),
    "cpus": ray.cluster_resources().get("CPU"), "task_hosts": sorted(hosts), "driver": socket.gethostname()}),
    flush=True)
