"""What a site's Singularity or Apptainer reads, against what ckit's profile says it reads (``site/compat.py``):
a zstd ``.sif`` runs only where the runtime knows zstd (Apptainer 1.4 and newer; no SingularityCE), so ckit
writes gzip for the others. The check runs the runtime's own ``exec`` on both files in a plain job."""

from __future__ import annotations

from ...launch.shell import q
from ...site.compat import sif_reads
from . import MARK, Check, CheckResult, Context


class SifCompression(Check):
    needs_image = True
    order = 30

    def __init__(self, kind: str) -> None:
        self.runtime = kind
        self.name = f"{kind}-sif-compression"
        self.summary = (f"{kind} runs a .sif in the compression ckit writes for the site, and refuses zstd exactly "
                        "when the profile's version says it reads none")

    def run(self, ctx: Context) -> CheckResult:
        kind = self.runtime or ""
        runtime = ctx.site.runtime(kind)
        version = runtime.version if runtime else ctx.node.versions.get(kind)
        flavour = ctx.node.flavours.get(kind, kind)  # the nodes' `singularity` may be Apptainer's alias
        judged = kind if runtime else flavour
        command = (runtime.command if runtime and runtime.command else kind)
        chosen = ctx.site.compressions("sif")[0] if ctx.site.compressions("sif") else "gzip"
        files = {"site": ctx.artifact("sif", chosen), "zstd": ctx.artifact("sif", "zstd")}
        lines = [f"{q(command)} exec {q(str(path))} true && echo {MARK} {name}=ran || echo {MARK} {name}=refused"
                 for name, path in files.items()]
        job = ctx.script(lines, self.name)
        seen = {key: values[0] for key, values in job.marked().items()}
        expect_zstd = "ran" if "zstd" in sif_reads(judged, version) else "refused"
        said = f"{kind} ({flavour})" if flavour != kind else kind
        if seen.get("site") == "ran" and seen.get("zstd") == expect_zstd:
            return self.result("passed", f"{chosen} .sif ran; zstd .sif {expect_zstd}, as {said} "
                               f"{version or '(any version)'} predicts", ctx.site)
        if seen.get("site") == "ran" and seen.get("zstd"):
            fix = (f"the nodes' {kind} is {flavour}: say kind: {flavour} in the profile" if flavour != kind
                   else f"correct runtimes.{kind}.version")
            return self.result("failed", f"zstd .sif {seen['zstd']}, but the profile's {kind} "
                               f"{version or '(no version)'} predicts {expect_zstd}: {fix}")
        return self.result("failed", f"the {chosen} .sif did not run: {job.tail()}")


BACKENDS = (SifCompression("apptainer"), SifCompression("singularity"))
