"""A runtime runs ckit's artifact as ckit writes it for the site (a ``.sif`` with the site's compression, a
``.sqsh`` for enroot/Pyxis or Charliecloud, the image for podman), through ckit's own job script: two tasks, each
sees its own ``--env`` value, the image's PATH (under Pyxis that is enroot's login shell kept off), the submit
folder as its working folder, and a ``--mount`` bind; the image's ENTRYPOINT does not re-read the command."""

from __future__ import annotations

from dataclasses import replace

from ...launch.model import LaunchRequest
from . import MARK, Check, CheckResult, Context, JobRun

BIND = "/mnt/0"  # in every .sqsh ckit writes: ch-run cannot make a mount point in a read-only image
# $$ is a literal $ in the words of a command: these expand in the task's shell, inside the container
PROBE = (f"echo {MARK} rank=$$CKIT_DOCTOR_RANK; echo {MARK} pwd=$$(pwd); echo {MARK} path=$$PATH; "
         f"echo {MARK} bind=$$(cat {BIND}/marker)")


class RunsArtifact(Check):
    needs_image = True

    def __init__(self, kind: str, target: str) -> None:
        self.runtime, self.target = kind, target
        self.name = f"{kind}-runs"
        what = f".{target}" if target else "image"
        self.summary = (f"{kind} runs ckit's {what} in ckit's job: per-task --env, the image's PATH, the submit "
                        "folder, a bind mount")
        self.order = 20

    def run(self, ctx: Context) -> CheckResult:
        site = ctx.runtime_site(self.runtime or "")
        if not self.target and (ctx.image or "").startswith("docker-daemon:"):
            # the image is in the nodes' own engine storage: nothing is pulled, whatever the nodes reach
            site = replace(site, compute_internet=True)
        image = str(ctx.artifact(self.target, None)) if self.target else reference(ctx.image or "")
        bind = ctx.folder / "bind"
        bind.mkdir(exist_ok=True)
        (bind / "marker").write_text(f"{self.name}\n")
        request = LaunchRequest(command=("sh", "-c", PROBE), image=image, runtime=self.runtime, tasks_per_node=2,
                                env=(("CKIT_DOCTOR_RANK", "$SLURM_PROCID"),), mounts=(f"{bind}:{BIND}",),
                                name=f"ckit-doctor-{self.runtime}", time="10")
        job = ctx.launch(site, request, self.name)
        return self.judge(ctx, job)

    def judge(self, ctx: Context, job: JobRun) -> CheckResult:
        if job.exit_code != 0:  # the runtime's own words (its log's end) say more than the markers it never printed
            return self.result("failed", f"job {job.job_id} exit {job.exit_code}: {job.tail()}")
        seen = job.marked()
        wrong = []
        if sorted(seen.get("rank", [])) != ["0", "1"]:
            wrong.append(f"per-task --env gave ranks {seen.get('rank')}, not 0 and 1")
        if set(seen.get("pwd", [])) != {str(ctx.folder)}:
            wrong.append(f"tasks started in {sorted(set(seen.get('pwd', [])))}, not the submit folder {ctx.folder}")
        for path in seen.get("path", []):
            lost = [p for p in ctx.image_path if p not in path.split(":")]
            if lost:
                wrong.append(f"the image's PATH lost {', '.join(lost)} (task PATH {path})")
                break
        if set(seen.get("bind", [])) != {self.name}:
            wrong.append(f"the bind mount {BIND} read {seen.get('bind')}")
        if not wrong:
            return self.result("passed", f"job {job.job_id}: 2 tasks, env, PATH, submit folder, bind",
                               ctx.site)
        return self.result("failed", "; ".join(wrong))


BACKENDS: tuple[Check, ...] = (RunsArtifact("apptainer", "sif"), RunsArtifact("singularity", "sif"), RunsArtifact("pyxis", "sqsh"),
            RunsArtifact("charliecloud", "sqsh"), RunsArtifact("podman", ""))


def reference(source: str) -> str:
    """The image podman runs: the SOURCE without its transport (docker://REF, docker-daemon:REF)."""
    return source.removeprefix("docker://").removeprefix("docker-daemon:")
