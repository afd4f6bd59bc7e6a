"""A 2-rank DDP job: gloo all_reduce, then one DDP step on nn.Linear; prints what each rank saw (one JSON line)."""

import json
import os
import socket

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")  # MASTER_ADDR/PORT, RANK, WORLD_SIZE from the environment (ckit's glue)
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)

torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.full((8, 4), float(rank + 1))  # different data per rank: the averaged gradient must agree
model(data).sum().backward()
optimizer.step()
params = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(params) for _ in range(world)]
dist.all_gather(gathered, params)
print("CKIT-RESULT " + json.dumps({
    "rank": rank, "world": world, "host": socket.gethostname(), "master": os.environ["MASTER_ADDR"],
    "local_rank": int(os.environ.get("LOCAL_RANK", -1)), "allreduce": total.item(),
    "params": [round(x, 6) for x in params.tolist()],
    "same_params": all(torch.equal(g, params) for g in gathered), "cwd": os.getcwd()}), flush=True)
dist.destroy_process_group()
