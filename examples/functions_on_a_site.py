# %% [markdown]
# # Python functions on a cluster, in ckit's container
#
# Guide 001 (KISTI Neuron) runs its experiments with submitit: `executor.submit(add, 5, 7)`, then
# `job.result()`. With ckit the same calls run in a container on a ckit site: the site's rules are checked
# before anything is queued, the function runs in the image's Python, and a multi-node job gets the
# framework's variables (RANK, WORLD_SIZE, MASTER_ADDR) in every task.
#
# Run it as a script or cell by cell. The site, partition and image come from the environment:
# `CKIT_EXAMPLE_SITE` (default `local`, this repository's test Slurm), `CKIT_EXAMPLE_PARTITION` and
# `CKIT_EXAMPLE_IMAGE` (a `.sqsh` whose Python has this Python's submitit and cloudpickle, e.g.
# `ckit build test-submitit --to sqsh` from tests/data/recipes).

# %%
import os

import ckit

site = os.environ.get("CKIT_EXAMPLE_SITE", "local")
image = os.environ["CKIT_EXAMPLE_IMAGE"]
executor = ckit.Executor("log_test", site, image=image, runtime="charliecloud")
executor.update_parameters(partition=os.environ.get("CKIT_EXAMPLE_PARTITION", "multi"), timeout_min=5)


# %% [markdown]
# ## One function call, one job (the guide's example 1)


# %%
def add(a, b):
    return a + b


job = executor.submit(add, 5, 7)
print("job", job.job_id)
print("add(5, 7) =", job.result())

# %% [markdown]
# ## A multi-task job: one result per task (the guide's example 3 runs `ntasks_per_node=3` on one node; here
# one task on each of two nodes)

# %%
executor.update_parameters(nodes=2, tasks_per_node=1)
job = executor.submit(add, 5, 7)
print("per task:", job.results())
executor.update_parameters(nodes=1)


# %% [markdown]
# ## Two nodes with PyTorch's DDP variables: a gloo all_reduce of the ranks


# %%
def all_reduce_rank():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE: set by ckit per task
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    dist.destroy_process_group()
    return value.item()


ddp = ckit.Executor("log_test", site, image=image, runtime="charliecloud", framework="ddp")
ddp.update_parameters(partition=os.environ.get("CKIT_EXAMPLE_PARTITION", "multi"), nodes=2, tasks_per_node=1)
print("all_reduce on 2 nodes:", ddp.submit(all_reduce_rank).results())


# %% [markdown]
# ## An exception in the job comes back with its traceback


# %%
def divide(a, b):
    return a / b


try:
    executor.submit(divide, 1, 0).result()
except Exception as err:  # submitit's FailedJobError, with the remote traceback in its message
    print("the job failed:", next(line for line in str(err).splitlines() if line.startswith("ZeroDivision")))
