"""Your cluster from Python: its profile detected (``ckit sites detect``) and proved by small jobs
(``ckit doctor``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import Folders, required_site

if TYPE_CHECKING:
    from ..cluster.checks import Check, CheckResult
    from ..cluster.detect import Detection
    from ..cluster.doctor import DoctorReport
    from ..site.model import Site


def detect_site(name: str = "detected", *, output: str | Path | None = None, compare: str | Site | None = None,
                partition: str | None = None, registry_url: str | None = None, sites: Folders = (),
                on_step: Callable[[str], None] | None = None) -> Detection:
    """A site profile from what the cluster says (``ckit sites detect``): Slurm's partitions, nodes, GRES, limits
    and rules; the runtimes, modules and file systems of the login node and, by a one-task job, of a compute node.

    :param name: the site's name (and the file's: NAME.yaml).
    :param output: write the profile there (a file, or a folder for NAME.yaml); None: only return it.
    :param compare: an existing profile (a name or a loaded one): the result's ``diff`` lists what differs.
    :param partition: where the probe job runs (default: Slurm's default partition).
    :param registry_url: the URL whose answer says the compute nodes reach a registry.
    :raises CkitError: Slurm does not answer here (exit 1); ConfigError for a bad ``output``.
    """
    from dataclasses import replace

    from ..cluster import answers, detect, probe

    gathered = answers.gather(answers.slurm_ask(timeout=600), partition=partition,
                              registry_url=registry_url or probe.DEFAULT_REGISTRY_URL,
                              on_step=on_step or (lambda s: None))
    found = detect.build(name, gathered)
    if compare is not None:
        import yaml

        profile = required_site(compare, sites)
        old = yaml.safe_load(profile.path.read_text()) if profile.path else {}
        found = replace(found, diff=detect.diff(old, found.profile))
    if output is not None:
        found = replace(found, path=detect.write(found, str(output)))
    return found


def doctor(site: str | Site, *, image: str | None = None, registry: str | None = None,
           checks: tuple[str, ...] = (), folder: str | Path | None = None, account: str | None = None,
           save: bool = True, insecure: bool = False, sites: Folders = (),
           on_result: Callable[[CheckResult], None] | None = None) -> DoctorReport:
    """Prove on the cluster that ckit's jobs run there (``ckit doctor``): each check a small job, reported as
    passed, failed, absent (the nodes lack what it needs) or skipped (give ``image``/``registry``).

    :param image: a SOURCE with ``sh`` in it (``docker://REF``, ``docker-daemon:REF``, ``oci:DIR``): ckit converts
        it for the site's runtimes.
    :param registry: ``HOST[:PORT]/REPO`` the nodes reach: the checks of what ``ckit push`` sends.
    :param checks: only these checks (``ckit doctor --list``).
    :param folder: where the jobs run and the artifacts go; every node must read it (default: the site's shared
        image folder, else ./ckit-doctor).
    :param save: write the passes back to the profile as verified facts with the date (when its file is writable).
    """
    from ..cluster.doctor import DoctorOptions, run

    profile = required_site(site, sites)

    def push(source: str, ref: str) -> str:
        from ._registry import push as push_image

        push_image(source, ref, image_format=None if source.endswith((".sif", ".sqsh")) else "docker",
                   site=profile if source.endswith((".sif", ".sqsh")) else None, insecure=insecure)
        return ref

    options = DoctorOptions(image=image, registry=registry, checks=tuple(checks), account=account, save=save,
                            folder=Path(folder) if folder else None)
    return run(profile, options, push=push, on_result=on_result or (lambda r: None))


def doctor_checks() -> list[dict[str, str]]:
    """The checks ``ckit doctor`` knows: name, what it proves, what it needs."""
    from ..cluster.checks import REGISTRY

    return [{"name": c.name, "summary": c.summary, "needs": ", ".join(_needs(c)) or "Slurm"} for c in REGISTRY.all()]


def _needs(check: Check) -> list[str]:
    out = [f"{check.runtime} on the nodes"] if check.runtime else []
    out += ["GPUs"] if check.needs_gpus else []
    out += [f"{check.needs_nodes} nodes"] if check.needs_nodes > 1 else []
    out += ["--image"] if check.needs_image else []
    out += ["--registry"] if check.needs_registry else []
    return out
