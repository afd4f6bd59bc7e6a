"""Seed 001's multi-node DDP program as its job script calls it (``python main.py -a $config --dist-url
tcp://$master_addr:$master_port --dist-backend 'nccl' --multiprocessing-distributed --world-size
$SLURM_JOB_NUM_NODES --rank $node_rank``): the process group from those arguments alone (gloo: no GPUs here),
an all_reduce, and what the task saw (one JSON line)."""

import argparse
import json
import os
import shutil
import socket

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("-a", "--arch")
parser.add_argument("--dist-url", required=True)
parser.add_argument("--dist-backend", required=True)
parser.add_argument("--multiprocessing-distributed", action="store_true")
parser.add_argument("--world-size", type=int, required=True)
parser.add_argument("--rank", type=int, required=True)
args = parser.parse_args()
dist.init_process_group("gloo", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
total = torch.tensor([float(args.rank + 1)])
dist.all_reduce(total)
print("CKIT-RESULT " + json.dumps({
    "rank": args.rank, "world": args.world_size, "dist_url": args.dist_url, "backend": args.dist_backend,
    "arch": args.arch, "host": socket.gethostname(), "allreduce": total.item(),
    "tool": shutil.which("ckit-guide-tool"), "path_head": os.environ["PATH"].split(":")[0]}), flush=True)
dist.destroy_process_group()
