"""Pyxis as ckit relies on it: a ``--container-image`` that starts with neither ``/`` nor ``.`` is a registry
reference (so ckit writes image files as absolute paths), and the importer a plugstack names converts an image
once for concurrent jobs, a second start taking the cached file."""

from __future__ import annotations

from ...launch.model import LaunchRequest
from ...launch.shell import q
from ...site.model import Site
from . import MARK, Check, CheckResult, Context


class RelativePath(Check):
    name = "pyxis-relative-path"
    summary = "Pyxis takes a relative image path without ./ for a registry reference; ./ and / are files"
    runtime = "pyxis"
    needs_image = True
    order = 40

    def run(self, ctx: Context) -> CheckResult:
        sqsh = ctx.artifact("sqsh", None)
        relative = sqsh.relative_to(ctx.folder) if sqsh.is_relative_to(ctx.folder) else None
        if relative is None:
            return self.result("skipped", f"the image file {sqsh} is not under the submit folder {ctx.folder}")
        lines = [f"srun -N1 -n1 --container-image={q(word)} true && echo {MARK} {name}=ran || "
                 f"echo {MARK} {name}=refused" for name, word in (("bare", str(relative)),
                                                                  ("dotted", f"./{relative}"))]
        seen = {k: v[0] for k, v in ctx.script(lines, self.name).marked().items()}
        if seen == {"bare": "refused", "dotted": "ran"}:
            return self.result("passed", f"{relative} was taken for a registry image, ./{relative} ran", ctx.site)
        return self.result("failed", f"bare path {seen.get('bare')}, ./ path {seen.get('dotted')}")


class Importer(Check):
    name = "pyxis-importer"
    summary = "the plugstack's importer converts a registry image once for two concurrent jobs; starts reuse it"
    runtime = "pyxis"
    needs_image = True
    needs_registry = True
    order = 45

    def fact(self, site: Site) -> str | None:
        kinds = [r.kind for r in site.runtimes]
        return f"runtimes.{kinds.index('pyxis')}.importer" if "pyxis" in kinds else None

    def missing(self, ctx: Context) -> CheckResult | None:
        runtime = ctx.site.runtime("pyxis")
        if runtime is None or not runtime.importer:
            return self.result("absent", "the profile's Pyxis names no importer= in plugstack.conf")
        return super().missing(ctx)

    def run(self, ctx: Context) -> CheckResult:
        assert ctx.push is not None and ctx.registry is not None
        ref = ctx.push(str(ctx.artifact("sqsh", None)), f"{ctx.registry}:ckit-doctor-importer")
        request = LaunchRequest(command=("echo", f"{MARK} ran=$SLURMD_NODENAME"), image=ref, runtime="pyxis",
                                nodes=1, name="ckit-doctor-importer", time="10")
        first = ctx.launch(ctx.site, request, self.name)
        second = ctx.launch(ctx.site, request, self.name)
        if first.exit_code == 0 and second.exit_code == 0 and first.marked().get("ran") and second.marked().get("ran"):
            return self.result("passed", f"jobs {first.job_id} and {second.job_id} started from {ref}", ctx.site)
        return self.result("failed", f"exits {first.exit_code}, {second.exit_code}: {second.tail()}")


BACKENDS = (RelativePath(), Importer())
