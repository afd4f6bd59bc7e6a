"""``ckit stage``: put an image where a site's compute nodes find it, in the format and compression they can use.

* a registry image: resolved to its manifest digest, converted (a ``.sif``/``.sqsh`` artifact is downloaded)
  into the site's shared image folder in the cache layout of :mod:`buildkit.storage.cache`, and recorded under its tag and
  digest; ``ckit launch --image REF`` then finds it, and the Pyxis importer serves the same file;
* a ckit stack: its newest engine build, converted and recorded under the stack's name (``--image STACK``);
* a local ``.sif``/``.sqsh``: copied, verified, as it is named, into the stager's own tree (``u<UID>/files/``).

The format follows the site's runtime (``.sqsh`` for Pyxis and Charliecloud, ``.sif`` for Singularity/Apptainer, or
``--to``: the runtime backends declare it), the
compression what its kernel mounts and its runtime's version reads (``Site.compressions``); a file that does not fit is refused
(exit 2) with the command that makes one that does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, IntegrityError
from ..storage import safefs
from ..storage.cache import CacheDir, safe_name

if TYPE_CHECKING:
    from ..registry.distribution.reference import Reference
    from ..site.model import Site

Log = Callable[[str], None]


@dataclass(frozen=True)
class StageResult:
    path: Path
    digest: str
    size: int
    source: str
    kind: str  # "image", "artifact", "stack" or "file"
    target: str
    compression: str
    converted: bool

    def as_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "digest": self.digest, "size": self.size, "source": self.source,
                "kind": self.kind, "target": self.target, "compression": self.compression,
                "converted": self.converted}


@dataclass(frozen=True)
class StagePlan:
    """What ``ckit stage`` will do (``--dry-run`` prints it): nothing here has touched a registry or engine."""

    source: str
    kind: str  # "file", "stack" or "registry" (an image, or a .sif/.sqsh artifact)
    folder: Path
    target: str | None  # None: an artifact keeps its format; an image then needs --to or --site
    compression: str | None  # None: a file or an artifact as it is
    site: str | None

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "folder": str(self.folder), "target": self.target,
                "compression": self.compression, "site": self.site}

    def describe(self) -> str:
        what = f".{self.target}" if self.target else "the artifact's own format"
        how = f" {self.compression}" if self.compression else ""
        return f"stage {self.source} ({self.kind}) into {self.folder} as {what}{how}\n"


def plan_stage(source: str, folder: Path, site: Site | None, *, to: str | None, compress: str | None,
               is_stack: bool) -> StagePlan:
    """Check the request and pick format and compression from the site (pure but for looking at ``source``)."""
    from ..image.squashfs.compression import choose_for

    if to not in (None, "sif", "sqsh"):
        raise ConfigError(f"--to {to!r}: expected sif or sqsh")
    target = to or site_target(site)
    kind = "file" if Path(source).is_file() else "stack" if is_stack else "registry"
    label = None
    if kind != "file" and target is not None:
        label = choose_for(compress, site, target).label
    return StagePlan(source, kind, folder, target, label, site.name if site else None)


def _artifact(kind: str) -> str:
    """The file format runtime ``kind`` runs ("" for none, a reference runtime or an unknown name)."""
    from ..launch.runtimes import REGISTRY

    backend = REGISTRY.find(kind)
    return backend.artifact if backend is not None else ""


def site_target(site: Site | None) -> str | None:
    """The format the site's first runtime that runs image files runs, or None."""
    for runtime in site.runtimes if site is not None else ():
        if _artifact(runtime.kind):
            return _artifact(runtime.kind)
    return None


def check_fits(path: Path, kind: str, site: Site, target: str | None) -> None:
    """Refuse (exit 2) a file the site's runtime cannot run or its kernel cannot mount."""
    from ..image.fit import check_fits as fits

    fits(path, kind, site, target, _runtime_of(site))


def _runtime_of(site: Site) -> str:
    return next((r.kind for r in site.runtimes if _artifact(r.kind)), "no container runtime")


def stage_file(src: Path, folder: Path, site: Site | None, target: str | None) -> StageResult:
    from ..registry.transfer.artifacts import detect_kind

    kind = detect_kind(src).name
    if site is not None:
        check_fits(src, kind, site, target)
    files = CacheDir(folder).writer().root / "files"  # this user's own tree: nobody else can plant a link there
    safefs.ensure_dir(files, 0o755)
    staged = copy_verified(src, files)
    return StageResult(staged.path, staged.digest, staged.size, str(src), "file", kind, "", True)


def stage_ref(ref: Reference, folder: Path, *, target: str | None, compression: str | None, site: Site | None,
              insecure: bool, ca_file: Path | None, log: Log, written: str = "") -> StageResult:
    """A registry image or artifact into ``folder`` (cache layout), recorded under its digest and its tag (as
    ``written`` too, so ``ckit launch --image`` finds it spelled the same way)."""
    from ..image.squashfs.compression import choose_for
    from ..registry.distribution.auth import resolve
    from ..registry.transfer.artifacts import kind_of_manifest
    from .fetch import Want, client_for, ensure

    want = Want(ref, target or "sqsh", "", resolve(ref.registry), insecure=insecure, ca_file=ca_file,
                uid=os.getuid())
    if target is None:  # no site format: an artifact keeps its own; an image needs to be told
        kind = kind_of_manifest(client_for(want).get_manifest(ref.repository, ref.reference).json())
        if kind is None:
            raise ConfigError(f"{ref} is a container image: say what to make of it",
                              hint="add --to sif|sqsh, or --site SITE to use the site's format")
        target = kind.name
    label = choose_for(compression, site, target).label
    want = Want(ref, target, label, want.credentials, insecure=insecure, ca_file=ca_file, uid=os.getuid())
    cache = CacheDir(folder)
    served = ensure(cache, want, log)
    if not ref.digest:
        from .fetch import tag_name

        record = {"ref": str(ref), "digest": served.digest}
        for name in {tag_name(ref), safe_name(written.removeprefix("docker://").replace("#", "/", 1))} - {""}:
            cache.write_ref("tags", name, record, private=want.credentials is not None)
    if site is not None:
        check_fits(served.path, target, site, None)
    return StageResult(served.path, served.digest, served.path.stat().st_size,
                       str(ref.with_digest(served.digest)), "image", target, label, served.converted)


def stage_stack(stack: str, fingerprint: str, image_id: str, folder: Path, *, target: str | None,
                compression: str | None, site: Site | None, log: Log) -> StageResult:
    """The stack's engine build (``image_id``) converted into ``folder``, recorded under the stack's name."""
    from ..image import convert

    if target is None:
        raise ConfigError(f"stage {stack}: say which format to make", hint="add --to sif|sqsh, or --site SITE")
    cache = CacheDir(folder)
    plan = convert.plan(f"docker-daemon:{image_id}", target, compress=compression, site=site)
    log(f"converting stack {stack} ({image_id[:19]}) to .{target} {plan.compression.label}")
    result = convert.execute(plan, cache.writer())
    label = plan.compression.label
    cache.write_ref("stacks", f"{safe_name(stack)}.{target}.{label}",
                    {"stack": stack, "fingerprint": fingerprint, "key": plan.key, "target": target,
                     "compression": label, "image": image_id, "staged": int(time.time())})
    cache.touch(plan.key)
    return StageResult(result.path, plan.source_digest, result.size, f"stack {stack} ({image_id[:19]})", "stack",
                       target, label, not result.cache_hit)


def expand_dir(text: str) -> Path:
    """A site folder with ``$USER``/``~`` expanded; unknown variables are bad input."""
    expanded = os.path.expanduser(os.path.expandvars(text))
    if "$" in expanded:
        raise ConfigError(f"shared image folder {text!r} names an unset variable",
                          hint="set the variable or pass --dest DIR")
    return Path(expanded)


def stage_dir(site_dir: str | None, dest: Path | None, site: str) -> Path:
    """``--dest``, else the site's shared image folder (its variables expanded)."""
    if dest is not None:
        return dest
    if not site_dir:
        raise ConfigError(f"site {site!r} has no shared_image_dir", hint="pass --dest DIR")
    return expand_dir(site_dir)


@dataclass(frozen=True)
class Staged:
    path: Path
    digest: str
    size: int
    source: str

    def as_json(self) -> dict[str, object]:
        return {"path": str(self.path), "digest": self.digest, "size": self.size, "source": self.source}


def copy_verified(src: Path, dest_dir: Path, expected_digest: str | None = None) -> Staged:
    """Copy a local artifact into ``dest_dir`` hashing what is written; rename only when it matches."""
    import hashlib

    from ..fs.files import atomic_path
    from ..registry.distribution.streams import READ_SIZE
    from ..registry.transfer.artifacts import detect_kind

    detect_kind(src)
    dest_dir.mkdir(parents=True, exist_ok=True)
    final = dest_dir / src.name
    h_src, size = hashlib.sha256(), 0

    def matches(tmp: Path) -> None:
        h_out = hashlib.sha256()
        with open(tmp, "rb") as back:
            while chunk := back.read(READ_SIZE):
                h_out.update(chunk)
        digest = "sha256:" + h_src.hexdigest()
        if h_out.hexdigest() != h_src.hexdigest() or (expected_digest and digest != expected_digest):
            raise IntegrityError(f"staged copy of {src} does not match "
                                 f"{expected_digest or 'the source'} (got sha256:{h_out.hexdigest()})")

    mode = src.stat().st_mode & 0o7777
    with atomic_path(final, mode=mode, verify=matches, inputs=[src]) as tmp, open(src, "rb") as inp, \
            open(tmp, "wb") as out:
        while chunk := inp.read(READ_SIZE):
            h_src.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return Staged(final, "sha256:" + h_src.hexdigest(), size, str(src))
