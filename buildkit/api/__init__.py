"""ckit from Python: every command's capability as one call with a typed result (``import ckit``).

``ckit`` (the import name the distribution installs) is this module. Each name is loaded when it is first
used, so ``import ckit`` and ``import buildkit`` stay cheap (the Pyxis importer imports the package on every
container start). The calls take the options of the command of the same name and return the objects its
``--json`` prints (each has ``as_json()``); errors are :class:`~buildkit.errors.CkitError` subclasses with an
``exit_code`` and a ``hint``. Progress and messages are callbacks, off unless passed.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing costs the Pyxis importer's start-up
if TYPE_CHECKING:
    from ..errors import (
        BuildError,
        CkitError,
        CompatError,
        ConfigError,
        ConvertError,
        IntegrityError,
        JobTimeout,
        LaunchError,
        PolicyError,
        RegistryError,
    )
    from ..image.convert import ConvertResult
    from ..launch.jobcontrol import (
        CancelResult,
        JobEntry,
        JobLogs,
        JobStatus,
        LogPiece,
        LogText,
        ShellCommand,
    )
    from ..launch.plan import LaunchPlan, LaunchRequest
    from ..launch.schedulers import Execution, LaunchResult
    from ..orchestration.build import BuildPlan, BuildResult
    from ..orchestration.stage import StagePlan, StageResult
    from ..progress import Meter, Reporter
    from ..registry.push import PushOutcome
    from ..registry.push_plan import PushPlan
    from ..site.model import Site
    from ._cache import CacheListing, cache_ls, cache_prune
    from ._cluster import detect_site, doctor, doctor_checks
    from ._executor import Executor, FunctionJob
    from ._images import build, convert, convert_many, inspect, plan_build
    from ._jobs import Job, cancel, follow, jobs, log_files, logs
    from ._launch import (
        NcclCheck,
        backends,
        env_pairs,
        execute,
        launch,
        nccl_report,
        plan_launch,
        render,
        shell,
        shell_command,
        submit,
    )
    from ._recipes import Rendered, recipes, render_recipe, show
    from ._registry import (
        LoginResult,
        PullResult,
        lock,
        login,
        logout,
        plan_push,
        plan_stage,
        pull,
        push,
        stage,
    )
    from ._sites import site, sites

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("build", "plan_build", "convert", "convert_many", "inspect"), "._images"),
    **dict.fromkeys(("push", "plan_push", "pull", "PullResult", "lock", "stage", "plan_stage", "login", "logout",
                     "LoginResult"), "._registry"),
    **dict.fromkeys(("plan_launch", "render", "execute", "launch", "submit", "shell", "shell_command",
                     "env_pairs", "backends", "nccl_report", "NcclCheck"), "._launch"),
    **dict.fromkeys(("recipes", "show", "render_recipe", "Rendered"), "._recipes"),
    **dict.fromkeys(("cache_ls", "cache_prune", "CacheListing"), "._cache"),
    **dict.fromkeys(("jobs", "logs", "log_files", "follow", "cancel", "Job"), "._jobs"),
    **dict.fromkeys(("site", "sites"), "._sites"),
    **dict.fromkeys(("detect_site", "doctor", "doctor_checks"), "._cluster"),
    **dict.fromkeys(("Executor", "FunctionJob"), "._executor"),
    **dict.fromkeys(("LaunchRequest", "LaunchPlan"), "..launch.plan"),
    **dict.fromkeys(("Execution", "LaunchResult"), "..launch.schedulers"),
    **dict.fromkeys(("JobEntry", "JobStatus", "JobLogs", "LogPiece", "LogText", "CancelResult", "ShellCommand"),
                    "..launch.jobcontrol"),
    **dict.fromkeys(("CkitError", "ConfigError", "PolicyError", "CompatError", "IntegrityError", "BuildError",
                     "ConvertError", "RegistryError", "LaunchError", "JobTimeout"), "..errors"),
    **dict.fromkeys(("Reporter", "Meter"), "..progress"),
    **dict.fromkeys(("BuildPlan", "BuildResult"), "..orchestration.build"),
    "ConvertResult": "..image.convert", "PushOutcome": "..registry.push", "PushPlan": "..registry.push_plan",
    **dict.fromkeys(("StagePlan", "StageResult"), "..orchestration.stage"),
    "Site": "..site.model",
}

__all__ = ["BuildError", "BuildPlan", "BuildResult", "CacheListing", "CancelResult", "CkitError",
           "CompatError", "ConfigError", "ConvertError", "ConvertResult", "Execution", "Executor",
           "FunctionJob", "IntegrityError", "Job", "JobEntry", "JobLogs", "JobStatus", "JobTimeout",
           "LaunchError", "LaunchPlan", "LaunchRequest", "LaunchResult", "LogPiece", "LogText",
           "LoginResult", "Meter", "NcclCheck", "PolicyError", "PullResult", "PushOutcome", "PushPlan",
           "RegistryError", "Rendered", "Reporter", "ShellCommand", "Site", "StagePlan", "StageResult",
           "backends", "build", "cache_ls", "cache_prune", "cancel", "convert", "convert_many", "detect_site",
           "doctor", "doctor_checks", "env_pairs", "execute",
           "follow", "inspect", "jobs", "launch", "lock", "log_files", "login", "logout", "logs",
           "nccl_report", "plan_build", "plan_launch", "plan_push", "plan_stage", "pull", "push", "recipes",
           "render", "render_recipe", "shell", "shell_command", "show", "site", "sites", "stage", "submit"]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
