"""The GPUs a job sees, against what the image needs: the driver must be at least the one its CUDA needs; and
nccl-tests' all_reduce_perf across two nodes reports its bus bandwidth."""

from __future__ import annotations

from ...launch.model import LaunchRequest
from ...outside import ascii_int
from ...site.model import Site
from . import MARK, Check, CheckResult, Context

# the oldest Linux driver of each CUDA major (NVIDIA's CUDA toolkit release notes, table 3)
MIN_DRIVER = {12: (525, 60), 11: (450, 80), 10: (410, 48)}


def gpu_partition(site: Site) -> str | None:
    return next((p.name for p in site.partitions if p.gpus_per_node), None)


def driver_ok(driver: str, cuda: str | None) -> bool | None:
    """Whether ``driver`` (535.104.05) runs the image's CUDA (12.2); None when either is not a version."""
    major = ascii_int((cuda or "").split(".")[0])
    parts = [ascii_int(p) for p in driver.split(".")[:2]]
    if major is None or major not in MIN_DRIVER or None in parts:
        return None
    return (parts[0] or 0, parts[1] if len(parts) > 1 and parts[1] is not None else 0) >= MIN_DRIVER[major]


class GpuDriver(Check):
    name = "gpus"
    summary = "a job on a GPU partition sees its GPUs, with a driver the image's CUDA runs on"
    needs_gpus = True
    order = 60

    def fact(self, site: Site) -> str | None:
        part = gpu_partition(site)
        return f"partitions.{part}.gpus_per_node" if part else None

    def run(self, ctx: Context) -> CheckResult:
        part = gpu_partition(ctx.site)
        wanted = next(p.gpus_per_node for p in ctx.site.partitions if p.name == part)
        request = LaunchRequest(command=("sh", "-c", f"nvidia-smi --query-gpu=driver_version --format=csv,noheader "
                                         f"| sed 's/^/{MARK} driver=/'"), partition=part, gpus_per_node=wanted,
                                tasks_per_node=1, name="ckit-doctor-gpus", time="5")
        job = ctx.launch(ctx.site, request, self.name)
        drivers = job.marked().get("driver", [])
        if job.exit_code != 0 or len(drivers) != wanted:
            return self.result("failed", f"partition {part}: {len(drivers)} of {wanted} GPUs seen: {job.tail()}")
        cuda = ctx.cache.get("cuda")
        ok = driver_ok(drivers[0], cuda)
        if ok is False:
            return self.result("failed", f"driver {drivers[0]} is older than CUDA {cuda} needs")
        return self.result("passed", f"{wanted} GPUs, driver {drivers[0]}"
                           + (f" runs CUDA {cuda}" if ok else " (the image names no CUDA version)"), ctx.site)


class NcclTests(Check):
    name = "nccl"
    summary = "nccl-tests all_reduce_perf in the image across two GPU nodes: its average bus bandwidth"
    needs_gpus = True
    needs_nodes = 2
    needs_image = True
    order = 85

    def run(self, ctx: Context) -> CheckResult:
        part = gpu_partition(ctx.site)
        gpus = next(p.gpus_per_node for p in ctx.site.partitions if p.name == part)
        request = LaunchRequest(command=("all_reduce_perf", "-b", "8", "-e", "256M", "-f", "2", "-g", "1"),
                                image=ctx.image, partition=part, framework="nccl-tests", nodes=2, gpus_per_node=gpus, tasks_per_node=gpus,
                                name="ckit-doctor-nccl", time="15")
        job = ctx.launch(ctx.site, request, self.name)
        from ...launch.nccl_report import parse_runs

        try:
            runs = parse_runs(job.output, "the nccl job's log")
        except Exception:  # noqa: BLE001 - a log without a report is the check's failure, said below
            runs = []
        if job.exit_code == 0 and runs:
            return self.result("passed", f"average bus bandwidth {runs[-1].avg_busbw:g} GB/s", ctx.site)
        return self.result("failed", f"exit {job.exit_code}: {job.tail()}")


BACKENDS: tuple[Check, ...] = (GpuDriver(), NcclTests())
