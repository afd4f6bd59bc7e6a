"""A 2-process Horovod job (Gloo, CPU): allreduce of rank+1 and one step of an averaged gradient (one JSON line each)."""

import json
import socket

import horovod.torch as hvd
import torch

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
model(torch.full((8, 4), float(hvd.rank() + 1))).sum().backward()
optimizer.step()
params = torch.cat([p.detach().flatten() for p in model.parameters()])
print("CKIT-RESULT " + json.dumps({
    "rank": hvd.rank(), "world": hvd.size(), "host": socket.gethostname(), "allreduce": total.item(),
    "params": [round(x, 6) for x in params.tolist()]}), flush=True)
