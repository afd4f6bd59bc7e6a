"""submitit's executor, run by ckit: each function call is a job on a ckit site, in ckit's container.

submitit pickles the call, runs ``submitit.core._submit`` in every task and pickles each task's result or
traceback; ckit adds the rest: the site's rules checked before anything is queued, the job script of the
site's container runtime and the framework's variables per task (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` for
``ddp``, ``TF_CONFIG`` for ``tf``), the check that the image's Python can read the pickle (same Python
``major.minor``, submitit and cloudpickle versions: before queueing when the image is a file ckit can read, and
again at the start of each task), and the job's state from the site's scheduler (the controller, accounting
or ckit's own record: a failed or cancelled job ends the wait even where ``sacct`` has nothing).

The folder holds pickles: whoever can write it runs code as its user (a result pickle is unpickled by
``job.result()``, the submitted one by the job), and whoever can read it reads the call's arguments and results.
So it is the user's alone (:func:`job_folder`): a folder another user can write is refused, one that is missing
is made 0700 (in a sticky shared folder too, when no one else took its name first), every file ckit and the job
write there is 0600, and a result is unpickled only from a file of the user's that nobody else can read or write.

The executor plans, renders and runs its jobs through a :class:`Front` handed down from above (the Python API's
own calls: the user's defaults, the image path, the preflight), so a function's job is planned as ``ckit launch``
plans one; ``ckit.Executor`` is this executor with the API's front.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from ..config.searchpath import suggest
from ..errors import ConfigError, JobTimeout, LaunchError
from ..launch.model import env_pairs
from ..launch.plan import LaunchPlan, LaunchRequest
from ..launch.schedulers import REGISTRY as SCHEDULERS
from ..launch.schedulers import Execution, LaunchResult

if TYPE_CHECKING:
    from ..site.model import Site

Folders = Sequence[str | Path]


class Front(Protocol):
    """How the executor plans, renders and runs a job (the Python API's ``plan_launch``, ``render``, ``execute``)."""

    def plan(self, site: Site, request: LaunchRequest) -> LaunchPlan: ...

    def render(self, plan: LaunchPlan) -> Any: ...

    def execute(self, plan: LaunchPlan, how: Execution) -> LaunchResult: ...

try:
    from submitit.core import core, utils
except ImportError as err:  # an optional extra
    raise ConfigError("ckit.Executor needs submitit, which is not installed",
                      hint="pip install 'ckit[submitit]'") from err

R = TypeVar("R")
MATCHED = ("submitit", "cloudpickle")  # what must be the same version on both sides of the pickle
_OWN = ("command", "output", "error")  # set by the executor, not by update_parameters
_ALIASES = {"timeout_min": "time", "job_name": "name", "ntasks_per_node": "tasks_per_node", "mem_gb": "mem"}
# Runs in the image's Python (any 3.x): each task's output to submitit's per-task logs, the versions
# checked (a mismatch becomes the task's result, so job.result() raises it), then submitit's own task runner.
BOOTSTRAP = """\
import os, sys
os.umask(0o077)
folder, want = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
job, task = os.environ.get("SLURM_JOB_ID", "0"), os.environ.get("SLURM_PROCID", "0")
for path in (folder, os.path.join(folder, "%s_submitted.pkl" % job)):
    st = os.lstat(path) if os.path.lexists(path) else None
    if st is not None and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        sys.stderr.write("ckit: %s is not this user's alone: not unpickled\\n" % path)
        sys.exit(3)
base = os.path.join(folder, "%s_%s_" % (job, task))
for fd, ext in ((1, "log.out"), (2, "log.err")):
    log = os.open(base + ext, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, fd)
    os.close(log)
problems = []
have = "%d.%d" % sys.version_info[:2]
if have != want["python"]:
    problems.append("Python %s (the submitting Python is %s)" % (have, want["python"]))
for name in ("submitit", "cloudpickle"):
    try:
        from importlib.metadata import version
        found = version(name)
    except Exception:
        found = None
    if found != want[name]:
        problems.append("%s %s (the submitting Python has %s)" % (name, found or "missing", want[name]))
if problems:
    import pickle
    message = ("ckit: the image's Python cannot run the submitted function: " + "; ".join(problems)
               + "\\n  hint: install the same versions in the image, or submit from a Python that has them")
    with open(base + "result.pkl.tmp", "wb") as out:
        pickle.dump(("error", message), out, protocol=2)
    os.replace(base + "result.pkl.tmp", base + "result.pkl")
    sys.stderr.write(message + "\\n")
    sys.exit(3)
sys.argv = [sys.argv[0], folder]
from submitit.core.submission import submitit_main
submitit_main()
"""


def job_folder(folder: Path, *, make: bool = False) -> Path:
    """``folder`` when it is this user's alone (module doc), made 0700 when missing and ``make``; ConfigError
    naming the folder and what is wrong otherwise."""
    from ..storage.safefs import place_flaw

    hint = "give a folder of your own that nobody else may write (ckit makes a missing one 0700)"
    why = place_flaw(folder)
    if why is None and make:
        with contextlib.suppress(FileExistsError):  # made meanwhile, or not a folder: checked below
            folder.mkdir(mode=0o700, parents=True)
        why = place_flaw(folder)  # made by someone else meanwhile?
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        st = None
    if why is None and st is not None:
        if not stat.S_ISDIR(st.st_mode):
            why = "it is not a folder"
        elif st.st_uid != os.geteuid():
            why = f"it belongs to uid {st.st_uid}"
        elif st.st_mode & 0o022:
            why = f"others may write it (mode {stat.S_IMODE(st.st_mode):04o})"
    if why is not None:
        raise ConfigError(f"folder {folder}: {why}: whoever can write it can run code as you through the pickles "
                          "ckit keeps there", hint=hint)
    return folder


def trusted_result(path: Path) -> None:
    """Refuse to unpickle a result file that is not the user's alone (someone else made it, or could change it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # none yet: submitit's own wait and message
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise LaunchError(f"{path}: not unpickled: it is not a file of yours that only you may read and write "
                          f"(uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})",
                          hint="someone else may have planted it; look at the folder's other files before you trust "
                               "them")


def local_versions() -> dict[str, str]:
    """The submitting Python's ``major.minor`` and the versions of the packages that must match."""
    from importlib.metadata import version

    return {"python": "{}.{}".format(*sys.version_info[:2]), **{name: version(name) for name in MATCHED}}


def check_image(plan: LaunchPlan, python: str, want: Mapping[str, str]) -> None:
    """Refuse (exit 2) an image file whose Python cannot read the pickle; an image ckit cannot read (a
    registry reference) is checked when each task starts."""
    from ..image.python import image_python

    if plan.image is None or plan.image.kind != "path":
        return
    found = image_python(Path(plan.image.value).expanduser(), python)
    if found is None:
        raise ConfigError(f"{plan.image.value}: no {python} on the image's PATH",
                          hint="pass python= the image's Python (an absolute path inside the image)")
    have = {"python": found.version, **{n: found.packages.get(n) for n in MATCHED}}
    wrong = [f"{n} {have[n] or 'missing'} (here: {want[n]})" for n in ("python", *MATCHED) if have[n] != want[n]]
    if wrong:
        raise ConfigError(f"{plan.image.value}: its {found.executable} cannot run functions pickled here: "
                          + "; ".join(wrong),
                          hint="install the same versions in the image (pip install submitit==… cloudpickle==…),"
                               " or submit from a Python that has the image's")


class _Watcher(core.InfoWatcher):
    """submitit's state poller (same back-off), answered by ckit's scheduler: ``sacct`` alone leaves a job
    that failed before writing its result waiting forever on a cluster without accounting."""

    def __init__(self, delay_s: int = 30) -> None:
        super().__init__(delay_s)
        from ..launch import schedulers

        self.control = schedulers.local()

    def update(self) -> None:
        self._num_calls += 1
        for job_id in self._registered - self._finished:
            status = self.control.status(job_id)
            self._info_dict[job_id] = {"State": status.state, "Active": "1" if status.active else ""}
            if status.done:
                self._finished.add(job_id)
        self._last_status_check = time.time()

    def get_state(self, job_id: str, mode: str = "standard") -> str:
        return self.get_info(job_id, mode=mode).get("State") or "UNKNOWN"

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        info = self.get_info(job_id, mode=mode)
        return bool(info) and not info.get("Active")


class FunctionJob(core.Job[R]):
    """A submitit job (``result()``, ``results()`` one per task, ``exception()``, ``stdout()``, ``done()``)
    whose state, cancel and wait go through ckit's scheduler; ``wait`` takes a timeout."""

    watcher = _Watcher()

    def cancel(self, check: bool = True) -> None:
        """Cancel the job (``scancel``)."""
        try:
            self.watcher.control.cancel(self.job_id)
        except LaunchError:  # scancel failed: only a checked cancel says so
            if check:
                raise

    def wait(self, timeout: float | None = None) -> None:
        """Block until every task is done; :class:`~buildkit.errors.JobTimeout` after ``timeout`` seconds
        (the job goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(f"job {self.job_id} is still {self.state} after {timeout:g} s",
                                 hint=f"wait longer, or cancel it (job.cancel(), ckit cancel {self.job_id})")
            time.sleep(1)

    def _get_outcome_and_result(self) -> tuple[str, Any]:
        trusted_result(self.paths.result_pickle)
        try:
            return super()._get_outcome_and_result()
        except utils.UncompletedJobError as err:  # no result: the job's own log says why (the runtime's errors)
            log = self.paths.folder / f"{self.job_id}_log.out"
            tail = log.read_text(errors="replace")[-4000:] if log.is_file() else ""
            raise utils.UncompletedJobError(f"{err}\nckit: the job's log {log}:\n{tail}") from None


class Executor(core.PicklingExecutor):
    """submitit's executor on a ckit site: ``submit(fn, *args)``, ``map_array``, ``batch()``,
    ``update_parameters(**options)`` as in submitit; each call a job in the site's container.

    :param folder: where the pickles, scripts and logs go; a folder the compute nodes see (the tasks get it at
        the same path).
    :param site: the site profile (name or loaded).
    :param image: the image the function runs in (a ``.sif``/``.sqsh`` path, a stack or a reference); None
        runs it in the site's own Python (``runtime="none"`` with ``venv=`` or ``conda=``).
    :param runtime: the container runtime (default: the site's first).
    :param framework: ``none``, or ``ddp``/``tf``/``mpi``… whose variables each task gets.
    :param python: the image's Python command.
    :param cwd: the submit folder the tasks start in (default: the current folder).
    :param check_image: read the image file and refuse it before queueing when its Python, submitit or
        cloudpickle differ from this Python's.

    ``update_parameters`` takes :class:`~buildkit.launch.plan.LaunchRequest`'s fields (``nodes``,
    ``tasks_per_node``, ``gpus_per_node``, ``cpus_per_task``, ``mem``, ``partition``, ``time``, ``env``,
    ``mounts``…), submitit's ``timeout_min``, ``mem_gb``, ``name``/``job_name`` and ``ntasks_per_node``, and
    ``slurm_``-prefixed names. As in submitit, a job is one task without GPUs until they are asked for.
    """

    job_class = FunctionJob
    front: ClassVar[Front]  # set by the subclass that hands it down (ckit.Executor)

    def __init__(self, folder: str | Path, site: str | Site, *, image: str | None = None, runtime: str | None = None,
                 framework: str = "none", python: str = "python3", cwd: str | Path | None = None,
                 sites: Folders = (), check_image: bool = True, max_num_timeout: int = 3) -> None:
        super().__init__(folder, max_num_timeout)
        job_folder(utils.JobPaths.get_first_id_independent_folder(self.folder))
        self.site = _site(site, sites)
        self.python, self.check_image = python, check_image
        self.cwd = Path(cwd).absolute() if cwd is not None else Path.cwd()
        # submitit's defaults: one task, no GPUs, whatever the framework or the partition would take
        self.request = LaunchRequest(command=(), image=image, runtime=runtime, framework=framework,
                                     name="submitit", tasks_per_node=1, gpus_per_node=0)
        self._checked: set[str] = set()

    @classmethod
    def affinity(cls) -> int:
        from ..process import which

        return 2 if which("sbatch") else -1

    @classmethod
    def _valid_parameters(cls) -> set[str]:
        return {f.name for f in fields(LaunchRequest)} - set(_OWN)

    def _internal_update_parameters(self, **kwargs: Any) -> None:
        changes: dict[str, Any] = {}
        for key, value in kwargs.items():
            name = _ALIASES.get(key.removeprefix("slurm_"), key.removeprefix("slurm_"))
            if name not in self._valid_parameters():
                hint = suggest(name, sorted(self._valid_parameters() | set(_ALIASES)))
                raise ConfigError(f"update_parameters({key}=…): not an option of ckit launch",
                                  hint=hint or "see ckit.LaunchRequest for the options")
            changes[name] = _value(name, value)
        self.request = replace(self.request, **changes)
        self.parameters.update(changes)

    def plan(self) -> LaunchPlan:
        """The launch plan of the next submission, checked against the site's rules (nothing is written)."""
        want = local_versions()
        words = [f"{k}={v}" for k, v in want.items()]
        request = replace(self.request, output=str(self.folder / "%j_log.out"),
                          command=(self.python, "-u", "-c", BOOTSTRAP, str(self.folder), *words),
                          env=(*self.request.env, ("SUBMITIT_EXECUTOR", "slurm")))
        plan = self.front.plan(self.site, request)
        if plan.runtime.kind != "none" and not self.folder.is_relative_to(self.cwd):
            # a container sees the submit folder; the pickles' folder is bound in too
            plan = self.front.plan(self.site, replace(request, mounts=(*request.mounts,
                                                                       f"{self.folder}:{self.folder}")))
        if self.check_image and plan.image is not None and plan.image.value not in self._checked:
            check_image(plan, self.python, want)
            self._checked.add(plan.image.value)
        return plan

    def _submit_command(self, command: str) -> core.Job[Any]:
        plan = self.plan()
        refused = SCHEDULERS.get(plan.site.scheduler, "site scheduler").no_control
        if refused:
            raise ConfigError(f"{self.site.name} submits nothing: {refused}", hint="run functions on a Slurm site")
        job_folder(utils.JobPaths.get_first_id_independent_folder(self.folder), make=True)
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        script = self.folder / f".submission_file_{uuid.uuid4().hex}.sh"
        result = self.front.execute(plan, Execution(submit=True, script=script, cwd=self.cwd))
        if result.job_id is None:
            raise ConfigError(f"{self.site.name}: the job was written to {result.script}, not submitted",
                              hint="is sbatch on PATH?")
        job: core.Job[Any] = self.job_class(folder=self.folder, job_id=result.job_id,
                                            tasks=list(range(plan.total_tasks)))
        job.paths.move_temporary_file(script, "submission_file", keep_as_symlink=True)
        return job

    def _internal_process_submissions(self, delayed_submissions: list[utils.DelayedSubmission]) -> list[core.Job[Any]]:
        """submitit's submission, every file it writes (the pickled call, the script) made 0600."""
        job_folder(utils.JobPaths.get_first_id_independent_folder(self.folder), make=True)
        umask = os.umask(0o077)  # submitit opens its files itself; only more closed ever, for any thread meanwhile
        try:
            return super()._internal_process_submissions(delayed_submissions)
        finally:
            os.umask(umask)

    def _num_tasks(self) -> int:
        return self.plan().total_tasks

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        return str(self.front.render(self.plan()))

    def _make_submission_command(self, submission_file_path: Path) -> list[str]:
        return ["sbatch", "--parsable", str(submission_file_path)]

    @staticmethod
    def _get_job_id_from_submission_command(string: bytes | str) -> str:
        text = string.decode() if isinstance(string, bytes) else string
        return text.strip().split(";")[0]


def _value(name: str, value: Any) -> Any:
    """A parameter as the request holds it: ``time`` from minutes, pairs from a mapping, tuples from lists."""
    if name == "time" and isinstance(value, (int, float)):
        return f"{int(value)}"
    if name == "mem" and isinstance(value, (int, float)) and not isinstance(value, bool):  # submitit's mem_gb
        return f"{max(round(value * 1024), 1)}M"
    if name == "env":
        return env_pairs(value)
    if name in ("mounts", "modules", "pre") and isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(value)
    return value


def _site(site: str | Site, sites: Folders) -> Site:
    """A site by name (from ``sites`` over the built-ins) or as loaded."""
    if not isinstance(site, str):
        return site
    from ..site.load import load_site

    return load_site(site, [Path(folder) for folder in sites])
