"""Seed 001's Ray tune driver as it connects (NERSC's variables ip_head and redis_password): both nodes seen,
a task on each (one JSON line)."""

import json
import os
import socket

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address="auto", _node_ip_address=os.environ["ip_head"].split(":")[0],  # noqa: SIM112 - the guide's names
         _redis_password=os.environ["redis_password"])  # noqa: SIM112
nodes = [n for n in ray.nodes() if n["Alive"]]


@ray.remote(num_cpus=0)
def where() -> str:
    return socket.gethostname()


hosts = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                 for n in nodes])
print("CKIT-RESULT " + json.dumps({"nodes": len(nodes), "task_hosts": sorted(hosts), "ip_head": os.environ["ip_head"],  # noqa: SIM112
                                   "driver": socket.gethostname()}), flush=True)
