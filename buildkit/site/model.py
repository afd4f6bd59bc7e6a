"""The site model: frozen dataclasses built from a validated profile (see schema.py for the YAML keys)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .compat import SIF_LAYER_PROTO, SIF_LAYER_V1, pulls_v1_layer, runs_sif, sif_reads
from .compat import label as runtime_label

FACT_TAGS = ("verified", "seed", "uncertain")


@dataclass(frozen=True)
class Fact:
    """Where one profile value comes from: ``verified`` (read in a cited source), ``seed`` (only in a seed
    guide) or ``uncertain`` (recalled or inferred; check it on the site)."""

    key: str
    tag: str
    source: str = ""
    note: str = ""


@dataclass(frozen=True)
class Partition:
    name: str
    gpus_per_node: int = 0
    gpu_type: str | None = None
    cpus_per_node: int | None = None
    mem_per_node_mb: int | None = None
    max_time: str | None = None
    max_jobs_per_user: int | None = None
    max_gpus_per_user: int | None = None
    nodes: str | None = None
    arch: str = "x86_64"
    internet: bool | None = None
    note: str = ""

    @property
    def node_count(self) -> int | None:
        """How many nodes ``nodes`` names (Slurm's hostlist: ``gpu[01-05,08]``, ``a,b``); None when not given."""
        return hostlist_count(self.nodes) if self.nodes else None


def hostlist_count(hostlist: str) -> int | None:
    """The number of hosts in a Slurm hostlist expression (``gpu[01-05,08],login1``); None when it is not one."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(hostlist + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(hostlist[start:index])
            start = index + 1
    total = 0
    for item in items:
        if not item.strip():
            return None
        count = 1
        for group in re.findall(r"\[([^\]]*)\]", item):
            spans = [span.partition("-") for span in group.split(",")]
            if not all(low.isdigit() and (not high or high.isdigit() and int(high) >= int(low))
                       for low, _, high in spans):
                return None
            count *= sum(int(high) - int(low) + 1 if high else 1 for low, _, high in spans)
        total += count
    return total


@dataclass(frozen=True)
class Runtime:
    """One way to run a program on the site's nodes."""

    kind: str  # a runtime backend's name (buildkit.launch.runtimes)
    module: str | None = None
    command: str | None = None
    flags: tuple[str, ...] = ()
    version: str | None = None  # the oldest version a job may run (3.4.2, 3.11, 3.x); None: not stated
    enroot: str | None = None  # pyxis: the enroot version it drives
    importer: str | None = None  # pyxis: its importer= (ckit, other); None: enroot import
    squashfuse: bool = False  # pyxis: use_squashfuse=1

    @property
    def label(self) -> str:
        """``singularity 3.x``, ``apptainer >= 1.4``: what ckit writes artifacts for."""
        return runtime_label(self.kind, self.version)


@dataclass(frozen=True)
class Policy:
    """Rules ckit checks before it writes or submits a job."""

    require_account: bool = False
    require_comment: bool = False
    comment_choices: tuple[str, ...] = ()
    forbid_options: tuple[str, ...] = ()
    cpus_per_gpu: int | None = None
    mem_per_gpu_gb: int | None = None
    min_gpus_per_job: int = 0
    submit_from: str | None = None


@dataclass(frozen=True)
class Platform:
    """A non-Slurm job platform (Apulis / DLWorkspace): what it provides to a job."""

    hostfile: str
    ssh_port_var: str
    network_interface: str
    rank_table: str | None = None
    device_types: tuple[str, ...] = ()
    npu_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Site:
    name: str
    description: str
    scheduler: str  # a scheduler backend's name (buildkit.launch.schedulers)
    shared_image_dir: str | None
    compute_internet: bool
    squashfs_compressions: tuple[str, ...]
    login: str | None = None
    partitions: tuple[Partition, ...] = ()
    retired_partitions: tuple[tuple[str, str], ...] = ()  # (name, why it is gone and what replaces it)
    default_partition: str | None = None
    runtimes: tuple[Runtime, ...] = ()
    mpi_plugin: str | None = None
    network_interface: str | None = None
    modules: tuple[str, ...] = ()
    conda: str | None = None
    venv: str | None = None
    rank_table: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[str, ...] = ()
    policy: Policy = field(default_factory=Policy)
    platform: Platform | None = None
    facts: tuple[Fact, ...] = ()
    # all_reduce_perf's bus bandwidth (GB/s) the site measured, by node count: nccl-report's default expectation
    nccl_busbw: tuple[tuple[int, float], ...] = ()
    doctor_date: str | None = None  # the last `ckit doctor` run; None: never run on this profile
    doctor: tuple[tuple[str, str], ...] = ()  # (check, passed|failed|absent|skipped) of that run
    path: Path | None = None

    def partition(self, name: str | None) -> Partition | None:
        wanted = name or self.default_partition
        for part in self.partitions:
            if part.name == wanted:
                return part
        return None

    def runtime(self, kind: str | None) -> Runtime | None:
        """The runtime of ``kind``, or the site's default (first) runtime when ``kind`` is None."""
        if kind is None:
            return self.runtimes[0] if self.runtimes else None
        for runtime in self.runtimes:
            if runtime.kind == kind:
                return runtime
        return None

    def expected_busbw(self, nodes: int) -> float | None:
        """The bus bandwidth the site measured for ``nodes`` nodes (the figure for the most nodes up to that)."""
        found = [gbps for count, gbps in self.nccl_busbw if count <= nodes]
        return found[-1] if found else None

    def fact(self, key: str) -> Fact | None:
        """The provenance of ``key`` or of its nearest tagged parent (``partitions.gp1d.max_time`` → ``partitions``)."""
        by_key = {f.key: f for f in self.facts}
        parts = key.split(".")
        while parts:
            found = by_key.get(".".join(parts))
            if found:
                return found
            parts.pop()
        return None

    def can_mount(self, compression: str) -> bool:
        """Whether the nodes' kernel can mount a squashfs with ``compression``."""
        return not self.squashfs_compressions or compression in self.squashfs_compressions

    def reads_through_squashfuse(self) -> bool:
        """Whether the site's Pyxis starts jobs straight from a .sqsh (squashfuse), so that a .sqsh for it is read
        block by block for the job's whole life rather than unpacked once (see squashfs.SQUASHFUSE)."""
        return any(r.kind == "pyxis" and r.squashfuse for r in self.runtimes)

    def sif_runtimes(self) -> tuple[Runtime, ...]:
        return tuple(r for r in self.runtimes if runs_sif(r.kind))

    def compressions(self, target: str) -> tuple[str, ...]:
        """The squashfs compressions a ``target`` artifact (sif or sqsh) may have here: what the nodes' kernel
        mounts (``squashfs_compressions``) and, for a .sif, what every Singularity/Apptainer of the site reads.
        Empty: no rule limits it."""
        allowed = list(self.squashfs_compressions)
        for runtime in self.sif_runtimes() if target == "sif" else ():
            reads = sif_reads(runtime.kind, runtime.version)
            allowed = [c for c in allowed if c in reads] if allowed else list(reads)
        return tuple(allowed)

    def refusal(self, target: str, compression: str) -> str | None:
        """Why a ``target`` artifact compressed with ``compression`` cannot run here (None: it can)."""
        reasons = []
        if not self.can_mount(compression):
            reasons.append(f"{self.name}'s kernel mounts only {', '.join(self.squashfs_compressions)} squashfs "
                           "(rule squashfs_compressions)")
        for runtime in self.sif_runtimes() if target == "sif" else ():
            if compression not in sif_reads(runtime.kind, runtime.version):
                reasons.append(f"its {runtime.label} reads no {compression} squashfs in a .sif")
        return "; ".join(reasons) or None

    def sif_layer_type(self) -> str:
        """The SIF layer media type every ``pull oras://`` of the site finds: the v1 type when all its
        Singularity/Apptainer versions know it, else the older one all versions pull."""
        runtimes = self.sif_runtimes()
        if runtimes and all(pulls_v1_layer(r.kind, r.version) for r in runtimes):
            return SIF_LAYER_V1
        return SIF_LAYER_PROTO
