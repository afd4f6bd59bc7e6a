"""``ckit doctor``'s checks: one small job each, registered by name (every module declares ``BACKENDS``).

A check names what it needs: a runtime on the compute nodes (``runtime``), GPUs, two nodes, an image
(``--image``) or a registry (``--registry``). What the nodes lack makes it *absent*, what the command line lacks
makes it *skipped*; only a job that ran and showed what the check asserts makes it *passed*."""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...launch.backend import Registry

if TYPE_CHECKING:
    from ...launch.model import LaunchRequest
    from ...site.model import Site
    from ..probe import Probe

STATUSES = ("passed", "failed", "absent", "skipped")
MARK = "ckit-doctor"  # the prefix of every line a check's job prints for the check to read


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # one of STATUSES
    detail: str
    fact: str | None = None  # the profile key a pass verifies

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fact": self.fact}


@dataclass(frozen=True)
class JobRun:
    """A check's job: its exit code and its log."""

    exit_code: int | None
    output: str
    job_id: str | None = None

    def marked(self) -> dict[str, list[str]]:
        """The ``ckit-doctor KEY=VALUE`` lines of the log, by key (one value per task that printed it)."""
        out: dict[str, list[str]] = {}
        for line in self.output.splitlines():
            word, _, rest = line.strip().partition(" ")
            if word == MARK:
                key, _, value = rest.partition("=")
                out.setdefault(key, []).append(value)
        return out

    def tail(self, lines: int = 6) -> str:
        return " | ".join(self.output.strip().splitlines()[-lines:]) or "(empty log)"


@dataclass
class Context:
    """What a check may use: the site, what its compute nodes have, a folder they read, the image and registry
    given, and the two ways to run a job (ckit's own job script, or a plain one for the runtime's own commands)."""

    site: Site
    node: Probe
    folder: Path
    launch: Callable[[Site, LaunchRequest, str], JobRun]  # (site, request, check name) -> the job
    script: Callable[[list[str], str], JobRun]  # (shell lines of a plain batch job, check name) -> the job
    artifact: Callable[[str, str | None], Path]  # (sif|sqsh, compression or None) -> a file the nodes read
    image: str | None = None
    registry: str | None = None
    push: Callable[[str, str], str] | None = None  # (a .sif/.sqsh path or a SOURCE, REF) -> REF pushed
    image_path: tuple[str, ...] = ()  # the image's PATH entries (from the artifact ckit wrote)
    cache: dict[str, Any] = field(default_factory=dict)

    def runtime_site(self, kind: str) -> Site:
        """The site, with ``kind`` first among its runtimes (added as the nodes have it when the profile lacks it)."""
        from dataclasses import replace

        from ...site.model import Runtime

        own = self.site.runtime(kind) or Runtime(kind=kind, version=self.node.versions.get(kind))
        return replace(self.site, runtimes=(own, *(r for r in self.site.runtimes if r.kind != kind)))


class Check(abc.ABC):
    name = ""
    summary = ""
    order = 50
    runtime: str | None = None  # a runtime kind the compute nodes must have
    needs_image = False
    needs_registry = False
    needs_gpus = False
    needs_nodes = 1

    def missing(self, ctx: Context) -> CheckResult | None:
        """absent (the nodes lack what it needs) or skipped (the command line does), else None: run it."""
        if self.runtime and self.runtime not in ctx.node.runtimes():
            return self.result("absent", f"no {self.runtime} on {ctx.node.host or 'the compute node'}")
        if self.needs_gpus and not any(p.gpus_per_node for p in ctx.site.partitions):
            return self.result("absent", f"{ctx.site.name} has no partition with GPUs")
        if self.needs_nodes > 1 and not _multi_node(ctx.site):
            return self.result("absent", f"{ctx.site.name} has no partition of {self.needs_nodes} nodes")
        if self.needs_image and not ctx.image:
            return self.result("skipped", "give --image SOURCE (an image with sh) to run it")
        if self.needs_registry and not (ctx.registry and ctx.push):
            return self.result("skipped", "give --registry HOST[:PORT]/REPO the nodes reach to run it")
        return None

    def fact(self, site: Site) -> str | None:
        """The profile key a pass verifies (None: no key of the profile holds it)."""
        if self.runtime:
            kinds = [r.kind for r in site.runtimes]
            return f"runtimes.{kinds.index(self.runtime)}" if self.runtime in kinds else None
        return None

    def result(self, status: str, detail: str, site: Site | None = None) -> CheckResult:
        return CheckResult(self.name, status, detail, self.fact(site) if site and status == "passed" else None)

    @abc.abstractmethod
    def run(self, ctx: Context) -> CheckResult:
        """Submit the check's job(s) and judge what they printed."""


def _multi_node(site: Site) -> bool:
    return any((p.node_count or 0) >= 2 for p in site.partitions)


def multi_node_partition(site: Site) -> str | None:
    """The default partition when it has two nodes, else the first that has."""
    default = site.partition(None)
    if default is not None and (default.node_count or 0) >= 2:
        return default.name
    return next((p.name for p in site.partitions if (p.node_count or 0) >= 2), None)


REGISTRY: Registry[Check] = Registry(__name__, __path__, "check")
