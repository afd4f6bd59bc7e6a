"""Charliecloud: ``ch-run`` of a ``.sqsh`` in each task, unprivileged (user namespaces; SquashFUSE built in).

What ch-run (0.31, Debian 12) does not do by itself, ckit's job does:

* the image ENV: ``--set-env`` reads the image's ``/ch/environment`` (written by ``ckit convert --to sqsh``),
  with ``--env-no-expand`` so values arrive as the image declares them; then every variable the job exports
  (the site's and ``--env`` values, ranks and addresses) is set again, so it wins over the image's, as with
  Pyxis's ``--container-env``;
* the working directory: ``--cd`` the submit folder (``--workdir`` changes it), bound at its own path;
* ``USER``: ch-run refuses to start without it, and a submit environment may lack it (a batch job has
  ``SLURM_JOB_USER``; the ``salloc`` of ``ckit shell`` not even that); ``--home`` binds ``$HOME`` at
  ``/home/$USER``, so a submit folder in the home is reachable, when ``$HOME`` is a folder where the job runs;
* several tasks per node share one container (``--join``): Open MPI's single-copy shared memory (CMA) does not
  work between user namespaces. The join tag is the job's own (its id and a random number, drawn once by the
  batch script, so every task of the job has the same): ch-run's default is the step number, so a semaphore a
  killed step left in a node's ``/dev/shm`` (``sem.ch-run_sem-0``) made every later job's step 0 on that node wait
  for a join lock until it failed. Such a container lives only as long as its first task's command: every command
  is held until the node's last one has ended (``JOIN_HOLD``).

A SquashFS image is read-only and ch-run 0.31 cannot create mount points in it: every bind destination must
exist in the image. ch-run shares the host's ``/tmp``; ckit's ``.sqsh`` carries ``/home`` and ``/mnt/0`` …
``/mnt/9`` (``--mount /data:/mnt/0 --workdir /mnt/0``). The command runs as given: no entrypoint re-reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import ConfigError
from ..shell import expand_quote, q, qv
from . import SUBMIT_MOUNT, RuntimeBackend, code_mount, workdir_word

if TYPE_CHECKING:
    from ..model import LaunchPlan

SETUP = (
    "# ch-run refuses to start without USER, and --home needs HOME; a bare submit environment may lack both",
    'export USER="${USER:-${SLURM_JOB_USER:-$(id -un)}}"',
    'export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d : -f 6)}"',
)

# --home binds $HOME at /home/$USER; ch-run stops at once ("can't bind: source not found") when $HOME is not a
# folder here, as when the submit shell's HOME is not mounted on the nodes: the job runs without it then, and says so
HOME_IF_THERE = (
    'if [ -d "$HOME" ]; then ckit_ch_run+=(--home); '
    'else echo "ckit: HOME=$HOME is not a folder on $(hostname): ch-run runs without --home" >&2; fi',
)

# Tasks that share one container (--join) live as long as the first one's command: ch-run's SquashFUSE server is
# that task's parent, so when its command ends the image is gone for the others (a peer still starting fails "join:
# no PID …", one still running dies of SIGBUS reading the image). So no task's command ends its container before
# every command of the node's step has ended: each marks its end in the container's /tmp (shared by the peers, as
# they share the mount namespace; named by job, step and node, as nodes may share a /tmp) and waits for all; the
# last to see all leave removes the marks.
JOIN_HOLD = (
    '"$@"; ckit_rc=$?; ckit_j="/tmp/.ckit-join-${{SLURM_JOB_ID}}.${{SLURM_STEP_ID}}.${{SLURM_NODEID}}"; '
    ': > "$ckit_j.in.${{SLURM_LOCALID}}"; '
    'until [ "$(set -- "$ckit_j".in.*; echo $#)" -ge {n} ]; do '
    'sleep 0.2 2>/dev/null || sleep 1 2>/dev/null || :; done; '
    ': > "$ckit_j.out.${{SLURM_LOCALID}}"; '
    'if [ "$(set -- "$ckit_j".out.*; echo $#)" -ge {n} ]; then rm -f "$ckit_j".in.* "$ckit_j".out.*; fi; '
    'exit $ckit_rc'
)


def _binds(plan: LaunchPlan) -> list[str]:
    """``SRC:DST`` words: site mounts may name $USER/$HOME (expanded in the job), the user's stay verbatim;
    ``:rw`` is what ch-run does anyway."""
    words = []
    for index, mount in enumerate(plan.mounts):
        plain = ":".join(mount.split(":")[:2])
        words.append(expand_quote(plain) if index < len(plan.site.mounts) else q(plain))
    code = code_mount(plan, read_only=False)  # its files are read-only: ch-run binds read-write only
    return words + ([expand_quote(code)] if code else [])


class Charliecloud(RuntimeBackend):
    name = "charliecloud"
    summary = "ch-run of a .sqsh in each task, unprivileged (Charliecloud)"
    order = 25
    files = (".sqsh", ".squashfs")
    artifact = "sqsh"

    def check_plan(self, plan: LaunchPlan) -> None:
        super().check_plan(plan)
        for mount in plan.mounts:
            if mount.endswith(":ro"):
                raise ConfigError(f"--runtime charliecloud cannot bind {mount} read-only: ch-run 0.31 binds "
                                  "read-write only", hint=f"drop ':ro' from {mount}, or use another --runtime")
        if plan.gpus_per_node:
            raise ConfigError(
                "--runtime charliecloud runs a .sqsh read-only, and its GPUs need the host's NVIDIA libraries "
                "injected into an unpacked image (ch-convert IMAGE.sqsh DIR; ch-fromhost --nvidia DIR), which "
                "ckit does not run", hint="use --runtime pyxis or singularity for GPU jobs, or --gpus-per-node 0")

    def setup(self, plan: LaunchPlan) -> tuple[str, ...]:
        words = [q(plan.runtime.command or "ch-run"), *(q(f) for f in plan.runtime.flags)]
        if plan.tasks_per_node > 1:  # one container per node: MPI's shared memory (CMA) needs one user namespace
            words += ["--join", '--join-tag="ckit-${SLURM_JOB_ID}-${RANDOM}${RANDOM}"']
        words += ["--cd", workdir_word(plan), "-b", SUBMIT_MOUNT]
        for bind in _binds(plan):
            words += ["-b", bind]
        return (*SETUP, "# ch-run in each task: the submit folder (bound) to start in, the image's ENV as written "
                        "(/ch/environment)", f"ckit_ch_run=({' '.join(words)} --env-no-expand --set-env)",
                *HOME_IF_THERE)

    def around_task(self, plan: LaunchPlan, inner: list[str]) -> list[str]:
        if plan.tasks_per_node < 2:
            return inner
        return ["sh", "-c", q(JOIN_HOLD.format(n=plan.tasks_per_node)), "ckit-join", *inner]

    def task_words(self, plan: LaunchPlan, exports: Sequence[str], tty: bool = False) -> list[str]:
        # the job's own variables over the image's (single quotes: ch-run strips one pair)
        return ['"${ckit_ch_run[@]}"', *(f"--set-env=\"{name}='${{{name}}}'\"" for name in exports),
                qv("CKIT_IMAGE"), "--"]


BACKENDS = (Charliecloud(),)
