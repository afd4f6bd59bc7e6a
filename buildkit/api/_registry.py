"""Registries and sites' image folders from Python: push, pull, lock and stage (what ``ckit push``, ``pull``,
``lock`` and ``stage`` do, with the same options and the results their ``--json`` prints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..progress import Reporter
from ._common import Folders, Log, folders, quiet, reporter, site_profile

if TYPE_CHECKING:
    from ..orchestration.stage import StagePlan, StageResult
    from ..registry.push import PushOutcome
    from ..registry.push_plan import PushPlan
    from ..site.model import Site


def _ca(ca_file: str | Path | None) -> Path | None:
    return Path(ca_file) if ca_file is not None else None


def _parameters(sets: Sequence[str]) -> dict[str, dict[str, str]] | None:
    from ..recipe.params import split_set

    result: dict[str, dict[str, str]] = {}
    for item in sets:
        layer, param, value = split_set(item)
        result.setdefault(layer, {})[param] = value
    return result or None


def _checked_site(source: str, site: str | Site | None, sites: Folders) -> Site | None:
    """The profile of ``site``, once a .sif/.sqsh ``source`` is seen to run there (exit 2 otherwise)."""
    profile = site_profile(site, sites)
    if profile is None:
        return None
    from ..orchestration.stage import check_fits, site_target
    from ..registry.transfer.artifacts import detect_kind

    path = Path(source)
    if path.is_file():
        check_fits(path, detect_kind(path).name, profile, site_target(profile))
    return profile


def plan_push(source: str | Path, ref: str, *, image_format: str | None = None, sets: Sequence[str] = (),
              site: str | Site | None = None, recipes: Folders = (), sites: Folders = ()) -> PushPlan:
    """What :func:`push` would send (``ckit push --dry-run``); contacts no registry."""
    from ..registry.distribution.reference import parse
    from ..registry.push_plan import plan

    profile = _checked_site(str(source), site, sites)
    return plan(str(source), parse(ref), image_format, list(sets), tuple(folders(recipes)),
                profile.sif_layer_type() if profile else None)


def push(source: str | Path, ref: str, *, image_format: str | None = None, stack: str | None = None,
         sets: Sequence[str] = (), source_digest: str | None = None, annotations: Mapping[str, str] | None = None,
         site: str | Site | None = None, insecure: bool = False, ca_file: str | Path | None = None,
         recipes: Folders = (), sites: Folders = (), progress: Reporter | None = None) -> PushOutcome:
    """Push an image, a ``.sif`` or a ``.sqsh`` to an OCI registry (``ckit push``).

    :param source: a ``.sif``/``.sqsh`` file, a stack (its newest build) or an image source.
    :param ref: ``REGISTRY/REPO:TAG``.
    :param image_format: ``docker`` or ``oci`` manifest for an image (default: the source's own).
    :param stack: the stack name recorded in the annotations; ``sets`` its parameters.
    :param source_digest: the digest of the image the artifact was made from.
    :param annotations: extra manifest annotations (OCI manifests).
    :param site: a ``.sif``/``.sqsh`` for this site: refused when its runtime cannot run it; a ``.sif`` gets
        the ORAS layer type its Singularity pulls.
    :returns: what was pushed (:meth:`PushOutcome.as_json` is ``ckit push --json``); ``notes`` hold warnings.
    """
    from ..registry.distribution.client import RegistryClient
    from ..registry.distribution.reference import parse
    from ..registry.push import PushOptions, execute

    target = parse(ref)
    options = PushOptions(stack, _parameters(sets), source_digest, dict(annotations or {}), image_format,
                          recipes_dirs=tuple(folders(recipes)))
    planned = plan_push(source, ref, image_format=image_format, sets=options.sets, site=site, recipes=recipes,
                        sites=sites)
    client = RegistryClient.for_reference(target, insecure=insecure, ca_file=_ca(ca_file))
    with reporter(progress).meter(f"push {Path(str(source)).name}", total=planned.size) as bar:
        return execute(client, planned, target, options, bar, bar.total)


@dataclass(frozen=True)
class PullResult:
    """What :func:`pull` wrote (``ckit pull --json``)."""

    path: str
    kind: str
    digest: str
    size: int
    reference: str
    annotations: dict[str, str]
    source_digest: str | None = None  # of an image converted with ``to``

    def as_json(self) -> dict[str, Any]:
        data = {"path": self.path, "kind": self.kind, "digest": self.digest, "size": self.size,
                "reference": self.reference, "annotations": self.annotations}
        return data if self.source_digest is None else {**data, "source_digest": self.source_digest}


def registry_ref(text: str) -> str:
    """A pull names a registry image: ``REF`` or, in the SOURCE grammar, ``docker://REF``; other forms are local."""
    from ..oci.sources import form_of, parse_spec

    form = form_of(text)
    if form is None:
        return text
    if form.name != "docker":
        raise ConfigError(f"{text!r} is a local image source; ckit pull reads a registry",
                          hint=f"convert it with `ckit convert {text} --to sif|sqsh`")
    return parse_spec(text).ref or ""


def pull(ref: str, *, output: str | Path = ".", to: str | None = None, insecure: bool = False,
         ca_file: str | Path | None = None, progress: Reporter | None = None) -> PullResult:
    """Pull a ``.sif``/``.sqsh`` artifact, or with ``to`` an image converted (``ckit pull``); every byte is
    digest-checked.

    :param ref: ``REGISTRY/REPO:TAG`` (or ``@sha256:…``, or ``docker://…``).
    :param output: the folder for the file.
    :param to: ``sif`` or ``sqsh``: convert a plain image.
    """
    from ..registry import pull as pulling
    from ..registry.distribution.client import RegistryClient
    from ..registry.distribution.reference import parse

    if to not in (None, "sif", "sqsh"):
        raise ConfigError(f"--to {to!r}: expected sif or sqsh")
    target = parse(registry_ref(ref))
    client = RegistryClient.for_reference(target, insecure=insecure, ca_file=_ca(ca_file))
    planned = pulling.plan(client, target, to)
    if planned.kind is None:  # the conversion reports its own progress
        result = pulling.execute(client, planned, Path(output), insecure=insecure, ca_file=_ca(ca_file),
                                 reporter=reporter(progress))
    else:
        with reporter(progress).meter(f"pull {target.repository}", total=planned.size) as bar:
            result = pulling.execute(client, planned, Path(output), progress=bar, total=bar.total)
    return PullResult(**result)


def lock(stack: str, *, sets: Sequence[str] = (), ngc: str | None = None, output: str | Path = "ckit.lock",
         insecure: bool = False, ca_file: str | Path | None = None, recipes: Folders = ()) -> dict[str, Any]:
    """Pin the stack's base image tag to its registry digest in a lock file (``ckit lock``); the lock's
    content and ``path`` (``ckit lock --json``)."""
    from ..fs.files import atomic_write
    from ..recipe.catalog import Catalog
    from ..registry.distribution.client import ManifestHead, RegistryClient
    from ..registry.distribution.reference import Reference, parse
    from ..registry.lock import lock_data, render, resolve_base

    resolved = Catalog.from_dirs(folders(recipes)).resolve(stack, sets=list(sets), ngc=ngc)
    if parse(resolved.base_image).registry == "localhost":  # a local image: no registry to ask for its digest
        knob = f"--set {resolved.base.name}.registry=REGISTRY/NAMESPACE" if any(
            name == "registry" for name, _ in resolved.base.params) else "a base on a registry"
        raise ConfigError(f"stack {stack} builds on {resolved.base_image}, an image of the local engine that no "
                          f"registry serves, so it has no digest to lock",
                          hint=f"push the image to a registry and lock with {knob}")

    def head_of(ref: Reference) -> ManifestHead:
        client = RegistryClient.for_reference(ref, insecure=insecure, ca_file=_ca(ca_file))
        return client.head_manifest(ref.repository, ref.reference)

    base_ref, head = resolve_base(resolved.base_image, head_of)
    data = lock_data(stack=resolved.stack, parameters=resolved.parameters, fingerprint=resolved.fingerprint,
                     base_image=resolved.base_image, base_ref=base_ref, head=head, sets=list(sets), ngc=ngc)
    atomic_write(Path(output), render(data).encode())
    return {**data, "path": str(output)}


def _is_stack(name: str, recipes: Folders) -> bool:
    from ..recipe.catalog import Catalog

    return "/" not in name and ":" not in name and not Path(name).is_file() and \
        name in Catalog.from_dirs(folders(recipes)).stack_names()


def plan_stage(source: str | Path, *, site: str | Site | None = None, dest: str | Path | None = None,
               to: str | None = None, compress: str | None = None, recipes: Folders = (),
               sites: Folders = ()) -> StagePlan:
    """What :func:`stage` would do (``ckit stage --dry-run``)."""
    from ..orchestration import stage as staging
    from ..orchestration.stage import stage_dir

    if site is None and dest is None:
        raise ConfigError("ckit stage needs --site SITE or --dest DIR")
    profile = site_profile(site, sites)
    folder = stage_dir(profile.shared_image_dir if profile else None, Path(dest) if dest else None,
                       profile.name if profile else "")
    return staging.plan_stage(str(source), folder, profile, to=to, compress=compress,
                              is_stack=_is_stack(str(source), recipes))


def stage(source: str | Path, *, site: str | Site | None = None, dest: str | Path | None = None,
          to: str | None = None, compress: str | None = None, sets: Sequence[str] = (), ngc: str | None = None,
          insecure: bool = False, ca_file: str | Path | None = None, recipes: Folders = (), sites: Folders = (),
          on_log: Log = quiet) -> StageResult:
    """Put an image where the site's compute nodes find it (``ckit stage``); ``launch`` then finds it.

    :param source: a registry image or artifact, a stack (its newest build) or a local ``.sif``/``.sqsh``.
    :param site: the site profile: its shared image folder, the format its runtime runs, a compression it mounts.
    :param dest: the folder to stage into (default: the site's shared image folder).
    :param to: ``sif`` or ``sqsh`` (default: what the site's runtime runs).
    :param compress: the squashfs compression of a converted image.
    :param on_log: called with each progress message.
    :returns: the staged file (:meth:`StageResult.as_json` is ``ckit stage --json``).
    """
    from ..orchestration import stage as staging
    from ..registry.distribution.reference import parse

    plan = plan_stage(source, site=site, dest=dest, to=to, compress=compress, recipes=recipes, sites=sites)
    profile = site_profile(site, sites)
    if plan.kind == "file":
        return staging.stage_file(Path(plan.source), plan.folder, profile, plan.target)
    if plan.kind == "stack":
        stack_name, fingerprint, image_id = _stack_build(plan.source, sets, ngc, recipes)
        return staging.stage_stack(stack_name, fingerprint, image_id, plan.folder, target=plan.target,
                                   compression=plan.compression, site=profile, log=on_log)
    return staging.stage_ref(parse(plan.source), plan.folder, target=plan.target, compression=plan.compression,
                             site=profile, insecure=insecure, ca_file=_ca(ca_file), log=on_log, written=plan.source)


def _stack_build(name: str, sets: Sequence[str], ngc: str | None, recipes: Folders) -> tuple[str, str, str]:
    """(stack, fingerprint, engine image id) of the stack's newest build."""
    from ..recipe.catalog import Catalog
    from ..registry.transfer.engine_images import stack_image

    resolved = Catalog.from_dirs(folders(recipes)).resolve(name, sets=list(sets), ngc=ngc)
    image = stack_image(resolved.fingerprint)
    if image is None:
        again = " ".join(["ckit build", name, *(f"--set {s}" for s in sets)])
        raise ConfigError(f"stack {name} has no build in the engine (fingerprint {resolved.fingerprint[:12]})",
                          hint=f"run `{again}` first")
    return resolved.stack, resolved.fingerprint, image


@dataclass(frozen=True)
class LoginResult:
    """What :func:`login` did: whether the registry checked the credentials, and the file they went to."""

    registry: str
    checked: bool  # False: the registry asks for no authentication (they were stored all the same)
    stored_in: str

    def as_json(self) -> dict[str, Any]:
        return {"registry": self.registry, "checked": self.checked, "stored_in": self.stored_in}


def login(registry: str, username: str, password: str, *, insecure: bool = False,
          ca_file: str | Path | None = None) -> LoginResult:
    """Check credentials against ``registry`` and store them the way docker does (``ckit login``).

    :raises RegistryError: the registry refused them."""
    from ..registry.distribution.auth import Credentials, store
    from ..registry.distribution.client import RegistryClient
    from ..registry.distribution.reference import api_host, parse_registry

    if not username or not password:
        raise ConfigError("ckit login needs a user name and a password")
    host = parse_registry(registry)
    creds = Credentials(username, password, source="ckit login")
    checked = RegistryClient(api_host(host), insecure=insecure, ca_file=_ca(ca_file), credentials=creds).check_login()
    return LoginResult(host, checked, str(store(host, creds)))


def logout(registry: str) -> list[str]:
    """Forget the credentials stored for ``registry`` (``ckit logout``); the files they were removed from."""
    from ..registry.distribution.auth import erase
    from ..registry.distribution.reference import parse_registry

    return list(erase(parse_registry(registry)))
