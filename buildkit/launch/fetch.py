"""``--fetch LINE``: what the compute nodes cannot download (no internet on tara's and twnia2's), fetched on this
machine before the job is written and submitted (seed 004: "download on the frontend first").

Each line is a shell line of the user's, run by bash in the submit folder, with the job's modules, environment
and image: the runtime's own words, as a task runs them (``singularity exec IMAGE sh -c LINE``), so the code that
will read the data in the job (torchvision's MNIST, say) is the code that downloads it here. Its output goes to
stderr; a line that fails stops the launch before anything is written (exit 1).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import LaunchError
from . import steps
from .plan import LaunchPlan
from .shell import q


def render_fetch(plan: LaunchPlan, line: str) -> str:
    """bash text that runs ``line`` here as a task of the job would run its command (no scheduler)."""
    from .schedulers.slurm import exported_env, fallbacks, prologue

    env = exported_env(plan)
    names = tuple(name for name, _ in env)
    step = " ".join(steps.program(plan, names, ["sh", "-c", q(line)]))
    # the runtimes bind and start in the submit folder, which outside a job is this one
    body = ["set -euo pipefail", "exec 1>&2  # the output is the fetch's report, not ckit's (--json)",
            'export SLURM_SUBMIT_DIR="$PWD"', *prologue(plan, env, (), pre=False), step]
    text = "\n".join(body)
    return "\n".join(fallbacks(text)) + text + "\n"


def fetch(plan: LaunchPlan, cwd: Path) -> None:
    """Run every ``--fetch`` line in ``cwd``; the first that fails stops the launch."""
    from ..process import interactive

    for line in plan.request.fetch:
        code = interactive(["bash", "-c", render_fetch(plan, line)], cwd=cwd)
        if code:
            raise LaunchError(f"--fetch {line!r} failed with exit code {code}; nothing was written or submitted",
                              hint="run it by hand to see why (ckit launch … --dry-run prints the job)")
