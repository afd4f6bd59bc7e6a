"""What ``ckit push`` sends, taken by the site's own tools on a compute node: ``pull oras://`` of a ``.sif``
(SingularityCE before 3.7 finds only the first SIF layer type, which ckit then pushes) and ``enroot import`` of
an image (enroot asks for the manifest with ``Accept: */*``, which a registry answers only for a docker manifest)."""

from __future__ import annotations

from ...launch.shell import q
from . import MARK, Check, CheckResult, Context


class OrasPull(Check):
    needs_image = True
    needs_registry = True
    order = 50

    def __init__(self, kind: str) -> None:
        self.runtime = kind
        self.name = f"{kind}-oras-pull"
        self.summary = f"{kind} pull oras:// takes the .sif ckit push sent for the site"

    def run(self, ctx: Context) -> CheckResult:
        assert ctx.push is not None and ctx.registry is not None
        kind = self.runtime or ""
        ref = ctx.push(str(ctx.artifact("sif", None)), f"{ctx.registry}:ckit-doctor-{kind}")
        out = ctx.folder / f"pulled-{kind}.sif"
        out.unlink(missing_ok=True)
        job = ctx.script([f"{kind} pull {q(str(out))} {q('oras://' + ref)} && {kind} exec {q(str(out))} true "
                          f"&& echo {MARK} pulled=yes"], self.name)
        if job.marked().get("pulled"):
            return self.result("passed", f"pulled and ran oras://{ref}", ctx.site)
        return self.result("failed", f"{kind} pull oras://{ref}: {job.tail()}")


class EnrootImport(Check):
    name = "enroot-import"
    summary = "enroot import docker://REGISTRY#REPO of the image ckit push sent, then enroot start runs it"
    runtime = "pyxis"
    needs_image = True
    needs_registry = True
    order = 55

    def run(self, ctx: Context) -> CheckResult:
        assert ctx.push is not None and ctx.registry is not None and ctx.image is not None
        ref = ctx.push(ctx.image, f"{ctx.registry}:ckit-doctor-enroot")
        host, _, repo = ref.partition("/")
        out = ctx.folder / "imported.sqsh"
        out.unlink(missing_ok=True)
        job = ctx.script([f"enroot import -o {q(str(out))} {q(f'docker://{host}#{repo}')} && "
                          f"enroot create -n ckit-doctor-$$ {q(str(out))} && "
                          f"enroot start ckit-doctor-$$ true && echo {MARK} imported=yes; "
                          "enroot remove -f ckit-doctor-$$ >/dev/null 2>&1"], self.name)
        if job.marked().get("imported"):
            return self.result("passed", f"enroot imported and started {ref}", ctx.site)
        return self.result("failed", f"enroot import {ref}: {job.tail()}")


BACKENDS: tuple[Check, ...] = (OrasPull("apptainer"), OrasPull("singularity"), EnrootImport())
