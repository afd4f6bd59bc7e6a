"""The scheduler itself: a job of ckit's runs (``job``), one runs on two nodes (``two-nodes``), and a 2-node
collective over gloo passes its all-reduce (``gloo``)."""

from __future__ import annotations

from ...launch.model import LaunchRequest
from ...site.model import Site
from . import MARK, Check, CheckResult, Context, multi_node_partition


class JobCheck(Check):
    name = "job"
    summary = "a job ckit writes for the site runs to its end (sbatch, srun, the log)"
    order = 10

    def fact(self, site: Site) -> str | None:
        return "scheduler"

    def run(self, ctx: Context) -> CheckResult:
        request = LaunchRequest(command=("echo", f"{MARK} ok=$SLURM_JOB_ID"), name="ckit-doctor-job", time="5")
        job = ctx.launch(ctx.site, request, self.name)
        if job.exit_code == 0 and job.marked().get("ok"):
            return self.result("passed", f"job {job.job_id} ran", ctx.site)
        return self.result("failed", f"job {job.job_id} exit {job.exit_code}: {job.tail()}")


class TwoNodesCheck(Check):
    name = "two-nodes"
    summary = "a 2-node job starts one task on each node (-N 2)"
    order = 11
    needs_nodes = 2

    def fact(self, site: Site) -> str | None:
        part = multi_node_partition(site)
        return f"partitions.{part}" if part else None

    def run(self, ctx: Context) -> CheckResult:
        part = multi_node_partition(ctx.site)
        request = LaunchRequest(command=("echo", f"{MARK} node=$SLURMD_NODENAME"), nodes=2, tasks_per_node=1,
                                partition=part, name="ckit-doctor-nodes", time="5")
        job = ctx.launch(ctx.site, request, self.name)
        nodes = sorted(set(job.marked().get("node", [])))
        if job.exit_code == 0 and len(nodes) == 2:
            return self.result("passed", f"partition {part}: tasks on {', '.join(nodes)}", ctx.site)
        return self.result("failed", f"partition {part}: exit {job.exit_code}, tasks on {nodes or 'no node'}: "
                           f"{job.tail()}")


# one all-reduce over gloo between the two nodes' tasks: each adds its rank + 1, so 2 tasks must see 3
GLOO = ("import os, sys\n"
        "try:\n import torch, torch.distributed as d\nexcept ImportError:\n"
        f" print('{MARK} torch=none'); sys.exit(0)\n"
        "d.init_process_group('gloo')\nt = torch.tensor([d.get_rank() + 1.0])\nd.all_reduce(t)\n"
        f"print('{MARK} sum=%g' % t.item())\n")


class GlooCheck(Check):
    name = "gloo"
    summary = "a 2-node torch.distributed all-reduce over gloo in the image (--framework ddp)"
    order = 80
    needs_nodes = 2
    needs_image = True

    def fact(self, site: Site) -> str | None:
        part = multi_node_partition(site)
        return f"partitions.{part}" if part else None

    def run(self, ctx: Context) -> CheckResult:
        kind = ctx.site.runtimes[0].kind
        if kind == "none" or kind not in ctx.node.runtimes():
            return self.result("absent", f"the site's first runtime ({kind}) is not on the nodes")
        from ...launch.runtimes import REGISTRY
        from .artifact import reference

        target = REGISTRY.get(kind, "runtime").artifact
        image = str(ctx.artifact(target, None)) if target else reference(ctx.image or "")
        part = multi_node_partition(ctx.site)
        command = ("sh", "-c", f"command -v python3 >/dev/null || {{ echo {MARK} torch=none; exit 0; }}; "
                   'exec python3 -c "$$0"', GLOO.replace("$", "$$"))
        request = LaunchRequest(command=command, image=image, nodes=2, launcher="srun",
                                tasks_per_node=1, partition=part, framework="ddp", name="ckit-doctor-gloo",
                                time="10", runtime=kind)
        job = ctx.launch(ctx.site, request, self.name)
        marked = job.marked()
        if marked.get("torch"):
            return self.result("skipped", "the image has no python3 with torch: give an image with PyTorch")
        if job.exit_code == 0 and marked.get("sum") == ["3", "3"]:
            return self.result("passed", f"partition {part}: both ranks summed 3 over gloo ({kind})", ctx.site)
        return self.result("failed", f"exit {job.exit_code}, sums {marked.get('sum')}: {job.tail()}")


BACKENDS = (JobCheck(), TwoNodesCheck(), GlooCheck())
