"""Put a registry image into a cache folder, or find it there: the work shared by the importer and ``ckit stage``.

:func:`ensure` asks the registry for the manifest digest of the reference *with the caller's credentials* (a
HEAD: this is also the access check, so a user the registry refuses gets its refusal, never the cached file),
then serves the artifact recorded for (digest, target, compression), or converts the image (a ``.sif``/``.sqsh``
artifact is downloaded instead) into the cache and records it. When the registry cannot be reached, a reference
by digest is served from the cache, and a tag by the digest it named last time, with a warning; either only to a
user the registry accepted for that repository before (or when it was public).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ConvertError, RegistryError
from ..registry.distribution.reference import Reference, enroot_form
from ..storage.cache import CacheDir, image_ref_name, safe_name
from ..storage.holds import is_key
from ..storage.safefs import Unsafe

if TYPE_CHECKING:  # requests loads only when the lean HEAD is not enough (start-up time)
    from ..registry.distribution.client import RegistryClient

Log = Callable[[str], None]


@dataclass(frozen=True)
class Want:
    """What to fetch and how: one reference, one target format and compression, one user's credentials."""

    ref: Reference
    target: str  # "sqsh" or "sif"
    compression: str  # a Compression label, e.g. "zstd:-3"
    credentials: Any = None  # registry.distribution.auth.Credentials or None (anonymous)
    insecure: bool = False
    ca_file: Path | None = None
    holder: str | None = None  # the step that holds the result until release (importer), None for stage
    uid: int = 0


@dataclass(frozen=True)
class Served:
    path: Path
    key: str
    digest: str  # the manifest digest the reference resolved to
    converted: bool  # this call made the artifact
    offline: bool = False
    warnings: tuple[str, ...] = field(default=())

    def as_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "key": self.key, "digest": self.digest, "converted": self.converted,
                "offline": self.offline, "warnings": list(self.warnings)}


def verifier(target: str) -> Callable[[Path], object]:
    """The cheap check a cached file passes before it is served: a whole squashfs superblock, a SIF header. The
    store's record already proves the file is unchanged since it was published (verified in full, or digest-checked
    as it was downloaded)."""
    if target == "sqsh":
        from ..image.squashfs.superblock import check

        return check

    def sif_header(path: Path) -> None:
        from ..image.sif.read import is_sif

        with open(path, "rb") as handle:
            if not is_sif(handle.read(64)):
                raise ConvertError(f"{path}: not a SIF file")

    return sif_header


def _resolve(want: Want) -> str | None:
    """The manifest digest through the lean HEAD (no ``requests`` loaded), or None for the full client."""
    from ..registry.distribution.head import head_digest

    ref = want.ref
    return head_digest(ref.api_host, ref.repository, ref.reference, want.credentials, insecure=want.insecure,
                       ca_file=want.ca_file)


def client_for(want: Want) -> RegistryClient:
    from ..registry.distribution.client import RegistryClient

    return RegistryClient(want.ref.api_host, insecure=want.insecure, ca_file=want.ca_file,
                          credentials=want.credentials)


def ensure(cache: CacheDir, want: Want, log: Log) -> Served:
    """The cached artifact for ``want`` (made first when missing); see the module doc."""
    ref = want.ref
    client = None
    try:
        digest = _resolve(want)
        if digest is None:  # not the plain case: the full client handles it (and words any refusal)
            client = client_for(want)
            digest = client.head_manifest(ref.repository, ref.reference).digest
    except RegistryError as err:
        if not err.unreachable:  # the client (lean HEAD or full) says whether any answer came
            raise
        return _offline(cache, want, err, log)
    if ref.digest and digest != ref.digest:
        raise RegistryError(f"{ref}: the registry names the manifest {digest}, not the digest asked for")
    cache.grant(ref.registry, ref.repository, "public" if want.credentials is None else str(want.uid))
    if not ref.digest:
        _record_tag(cache, want, digest)
    return _cached(cache, want, digest) or _make_once(cache, want, client, digest, log)


def _record_tag(cache: CacheDir, want: Want, digest: str) -> None:
    """Remember which digest the tag named (for offline gets), in this user's tree when it has one."""
    name = tag_name(want.ref)
    try:
        seen = cache.read_ref(cache.writer(), "tags", name)
        if (seen or {}).get("digest") != digest:
            cache.write_ref("tags", name, {"ref": str(want.ref), "digest": digest}, private=_private(want))
    except (ConfigError, OSError, Unsafe):
        pass  # a reader of a folder it cannot write: nothing to remember, nothing lost


def _private(want: Want) -> bool:
    return want.credentials is not None


def _make_once(cache: CacheDir, want: Want, client: Any, digest: str, log: Log) -> Served:
    """One producer per image and format: the others wait on its lease, cheaply (no converter loaded, no more
    requests), and take the record it writes as soon as it is there. A trusted writer other than this user that
    converts the image already is waited for too (for at most the lease wait), so a cluster whose users trust one
    converter converts each image once."""
    from ..storage.lease import Lease

    ref = want.ref
    name = image_ref_name(ref.registry, ref.repository, digest, want.target, want.compression)
    made_elsewhere: list[Served] = []

    def done() -> bool:
        hit = _cached(cache, want, digest)
        if hit is not None:
            made_elsewhere.append(hit)
        return hit is not None

    store = cache.writer()
    if _await_trusted(cache, store, name, done, log):
        return made_elsewhere[0]
    store.ensure()
    if _private(want):  # lease files lie in a folder others may list: a private repository's name is not shown
        name = hashlib.sha256(name.encode()).hexdigest()
    lease = Lease(store.locks / f"{name}.lease", holder=cache.holder, on_wait=log)
    if not lease.acquire(until=done):
        return made_elsewhere[0]
    try:
        return _cached(cache, want, digest) or _produce(cache, want, client or client_for(want), digest, log)
    finally:
        lease.release()


def _await_trusted(cache: CacheDir, writer: Any, name: str, done: Callable[[], bool], log: Log) -> bool:
    """Wait while another trusted tree's live lease converts ``name``; whether the result arrived meanwhile."""
    from ..storage.lease import Watch, holder_text, read_owner, stale_seconds, wait_seconds

    watches = {s.locks / f"{name}.lease": Watch(stale_seconds()) for s in cache.readers() if s.root != writer.root}
    began = time.monotonic()
    while watches:
        for path, watch in list(watches.items()):
            seen = read_owner(path)
            if seen is None or seen[1] is None or watch.is_stale(*seen):
                del watches[path]
        if not watches or time.monotonic() - began > wait_seconds():
            return False
        if done():
            return True
        if time.monotonic() - began > 1 and not int(time.monotonic() - began) % 15:
            holders = "; ".join(f"{holder_text(read_owner(p))} in {p.parent.parent}" for p in watches)
            log(f"waiting for {holders} to finish converting this image (at most {wait_seconds():.0f} s)")
        time.sleep(0.25)
    return False


def tag_name(ref: Reference) -> str:
    """The tag record of a reference by tag: ``<registry>+<repo>:<tag>``."""
    return safe_name(f"{ref.registry}/{ref.repository}:{ref.reference}")


def _names(record: dict[str, Any], want: Want, digest: str) -> bool:
    """The record is one for this digest, format and compression (a record found under another name is not)."""
    return is_key(record.get("key")) and record.get("digest") == digest and record.get("target") == want.target \
        and record.get("compression") == want.compression


def _cached(cache: CacheDir, want: Want, digest: str, offline: bool = False,
            warnings: tuple[str, ...] = ()) -> Served | None:
    ref = want.ref
    name = image_ref_name(ref.registry, ref.repository, digest, want.target, want.compression)
    for store in cache.readers():
        record = cache.read_ref(store, "images", name)
        if record is None or not _names(record, want, digest):
            continue  # a record names a key, never a path
        key = record["key"]
        if want.holder:  # hold and stamp the use before looking: an evictor that sees neither has not removed it
            cache.hold(key, want.holder)
        cache.touch(key)
        entry = store.get(key, want.target, verifier(want.target))
        if entry is not None:
            return Served(entry.path, key, digest, False, offline, warnings)
    return None


def _offline(cache: CacheDir, want: Want, err: RegistryError, log: Log) -> Served:
    ref = want.ref
    warnings: tuple[str, ...] = ()
    digest = ref.digest
    if digest is None:
        seen = [r for _, r in cache.find_refs("tags", tag_name(ref)) if isinstance(r.get("digest"), str)]
        if not seen:
            raise RegistryError(f"{err.message}; {ref} has never been cached here", hint=err.hint) from err
        digest = seen[0]["digest"]
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(seen[0].get("time") or 0))
        warnings = (f"registry {ref.registry} cannot be reached: serving {ref} as {digest}, the digest the tag "
                    f"named on {when}",)
    if not cache.granted(ref.registry, ref.repository):
        raise RegistryError(f"{err.message}; the registry never confirmed this user's access to {ref.repository}, "
                            "so the cached copy is not served", hint="retry when the registry can be reached")
    found = _cached(cache, want, digest, offline=True, warnings=warnings)
    if found is None:
        raise RegistryError(f"{err.message}; {ref.registry}/{ref.repository}@{digest} is not in the cache",
                            hint=err.hint) from err
    for warning in warnings:
        log(f"warning: {warning}")
    return found


def _produce(cache: CacheDir, want: Want, client: Any, digest: str, log: Log) -> Served:
    from ..registry.transfer.artifacts import kind_of_manifest

    ref = want.ref
    pinned = Reference(ref.registry, ref.repository, None, digest)
    manifest = client.get_manifest(ref.repository, digest).json()
    kind = kind_of_manifest(manifest)
    began = time.monotonic()
    if kind is not None:
        key, made = _store_artifact(cache, want, client, pinned, kind, manifest, log)
        source_digest = digest
    else:
        key, made, source_digest = _convert(cache, want, client, pinned, log)
    record = {"ref": str(ref), "digest": digest, "key": key, "target": want.target,
              "compression": want.compression, "source_digest": source_digest}
    cache.write_ref("images", image_ref_name(ref.registry, ref.repository, digest, want.target, want.compression),
                    record, private=_private(want))
    entry = cache.writer().get(key, want.target)
    if entry is None:
        raise ConvertError(f"{ref}: the cached artifact vanished right after it was made",
                           hint="the cache may be too small for this image: raise max_size")
    cache.touch(key)
    if made:
        log(f"{ref} ({digest}) cached in {time.monotonic() - began:.1f} s as {entry.path}")
    return Served(entry.path, key, digest, made)


def _convert(cache: CacheDir, want: Want, client: Any, pinned: Reference, log: Log) -> tuple[str, bool, str]:
    from ..image import convert
    from ..image.sources.registry import RegistrySource
    from ..registry.distribution.blobstream import blob_chunks

    # the image read with the caller's client (the credentials that passed the access check)
    source = RegistrySource(enroot_form(pinned), pinned, lambda: client, blob_chunks)
    plan = dataclasses.replace(convert.plan(source, want.target, compress=want.compression), private=_private(want))
    if want.holder:
        cache.hold(plan.key, want.holder)
    log(f"converting {want.ref} ({pinned.digest}) to .{want.target} {plan.compression.label}: the first use of it "
        "with this cache")
    result = convert.execute(plan, cache.writer())
    return plan.key, not result.cache_hit, plan.source_digest


def _store_artifact(cache: CacheDir, want: Want, client: Any, pinned: Reference, kind: Any, manifest: dict[str, Any],
                    log: Log) -> tuple[str, bool]:
    """A ``.sif``/``.sqsh`` pushed as an artifact (``manifest``: its manifest, as read to tell it from an image):
    its layer is the file, downloaded verified into the cache."""
    from ..storage.store import make_key

    if kind.name != want.target:
        raise ConfigError(f"{want.ref} is a .{kind.name} artifact, not a container image or a .{want.target}",
                           hint=f"push the container image, or a .{want.target}, to use it here")
    layer = next(x for x in manifest.get("layers", []) if x.get("mediaType") in kind.layer_types())
    key = make_key(artifact_digest=layer["digest"], target=kind.name)
    store = cache.writer()
    if store.get(key, kind.name, verifier(kind.name)) is not None:
        return key, False
    if want.holder:
        cache.hold(key, want.holder)
    with store.lock(key):
        if store.get(key, kind.name, verifier(kind.name)) is not None:
            return key, False
        log(f"downloading the .{kind.name} artifact {want.ref} ({layer['digest']})")
        store.clean_temps(key)
        temp = store.temp_path(key, kind.name)
        try:
            with open(temp, "wb") as out, client.open_blob(pinned.repository, layer["digest"],
                                                           int(layer["size"])) as blob:
                while chunk := blob.read(1 << 20):  # checked against the digest as it streams
                    out.write(chunk)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        meta = {"source": str(pinned), "source_digest": layer["digest"], "target": kind.name,
                "compression": "artifact", "created": int(time.time())}
        store.publish(key, kind.name, temp, meta, verifier(kind.name), private=_private(want))
    return key, True
