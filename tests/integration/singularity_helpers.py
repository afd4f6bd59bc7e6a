"""Helpers of the tests that run the Singularity sites' jobs under the real Apptainer (Debian's, whose package
ships ``singularity`` as its alias): site profiles for this machine derived from the real ones, and the jobs
``ckit launch`` submits with them (the ``apptainer`` fixture runs the command)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.registry_helpers import Ran, ckit

SITES = Path(__file__).resolve().parents[2] / "sites"
JOBS = Path(__file__).parent / "jobs"
SINGULARITY_SITES = ("twnia2", "tara", "neuron")
# what each site's rules ask of every job (twnia2 and tara: a project; neuron: the application)
SITE_ARGS = {"twnia2": ("--account", "P1"), "tara": ("--account", "proj0001"), "neuron": ("--comment", "pytorch")}


@contextmanager
def module_folder(factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A module's files, on disk and readable by every user (the test nodes' mount namespaces see no mount made
    after they started); removed when the module ends."""
    path = factory.mktemp(name)
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _exists(data: Any, parts: list[str]) -> bool:
    for part in parts:
        if isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        elif isinstance(data, dict) and part in data:
            data = data[part]
        else:
            return False
    return True


def sites_for_this_machine(folder: Path, cpus: int) -> Path:
    """twnia2, tara and neuron for this machine (:func:`site_for_this_machine`); the folder for CKIT_SITES_PATH."""
    for name in SINGULARITY_SITES:
        site_for_this_machine(name, folder, cpus)
    return folder / "sites"


def site_for_this_machine(name: str, folder: Path, cpus: int) -> Path:
    """The built-in profile ``name`` in ``folder``/sites, changed only where this machine differs: its partitions
    (partition multi: the two namespaced nodes n1 and n2, no GPUs) and so the GPU rules, and its folders (shared
    images, the submit folder) under ``folder``. Its runtime stays the site's own (``singularity`` of the version
    the site runs): what ckit writes for it must run under any later Apptainer too, as it does here."""
    profile = yaml.safe_load((SITES / f"{name}.yaml").read_text())
    profile["partitions"] = {"multi": {"gpus_per_node": 0, "cpus_per_node": cpus, "nodes": "n[1-2]",
                                       "note": "this machine's two namespaced test nodes"}}
    profile["default_partition"] = "multi"
    policy = profile.get("policy", {})
    policy.pop("min_gpus_per_job", None)  # no GPUs here
    if "submit_from" in policy:
        policy["submit_from"] = str(folder / "scratch" / "$USER")
    profile["shared_image_dir"] = str(folder / "shared" / "$USER")
    profile["facts"] = {k: v for k, v in profile.get("facts", {}).items() if _exists(profile, k.split("."))}
    sites = folder / "sites"
    sites.mkdir(parents=True, exist_ok=True)
    (sites / f"{name}.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return sites


@dataclass(frozen=True)
class Job:
    returncode: int
    results: list[dict[str, Any]]
    log: str
    ran: Ran


def launch(site: str, folder: Path, env: dict[str, str], *args: str, program: str | None = None) -> Job:
    """``ckit launch --site SITE … --submit --wait`` from ``folder`` (with ``program`` of tests/integration/jobs
    copied there) on the site's default partition; the CKIT-RESULT lines of the job's log."""
    if program:
        (folder / program).write_bytes((JOBS / program).read_bytes())
    ran = ckit("launch", "--json", "--site", site, *SITE_ARGS[site], "-J", "sing", "--submit", "--wait", *args,
               env=env, cwd=folder)
    job = json.loads(ran.stdout)["job_id"] if ran.stdout.strip().startswith("{") else None
    log = (folder / f"sing-{job}.out").read_text(errors="replace") if job else ""
    results = [json.loads(line.split("CKIT-RESULT ", 1)[1]) for line in log.splitlines() if "CKIT-RESULT " in line]
    return Job(ran.returncode, sorted(results, key=lambda r: r.get("rank", 0)), log, ran)
