"""Convert any image to a ``.sif`` or an Enroot ``.sqsh``: plan (identify, choose, key), then execute.

Execution never runs as root and never extracts a layer: layers → merged index (+ the target's rootfs
additions) → squashfs written from the layers' byte ranges → (SIF wrapper). Results live in the local store,
keyed by the image's config digest and the conversion options; a hit does no work and ``-o FILE`` is an atomic
link or copy from it.

Ownership: a ``.sif`` keeps the image's owners and modes (what ``apptainer build`` as root keeps). A ``.sqsh``
is all-root with ``u+rX`` (and ``u+w`` on directories), exactly what ``enroot import`` produces
(``mksquashfs -all-root`` after ``chmod -R u+rX``), so enroot and Pyxis see the same tree.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import store as store_mod
from ..config import limits
from ..config.jsondoc import parse as parse_json
from ..errors import ConfigError, ConvertError
from ..fsutil import check_output
from ..progress import SILENT, Reporter
from . import squashfs
from .flatten import flatten
from .layerfile import prepare_all
from .model import ImageConfig
from .source import DaemonSource, DockerArchiveSource, OciLayoutSource, Source, parse_source
from .squashfs_writer import Ownership

if TYPE_CHECKING:
    from ..site.model import Site

TARGETS = ("sif", "sqsh")


@dataclass(frozen=True)
class ConvertResult:
    path: Path
    target: str
    source_digest: str
    compression: str
    size: int
    seconds: float
    cache_hit: bool
    key: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "target": self.target, "source_digest": self.source_digest,
                "compression": self.compression, "size": self.size, "seconds": round(self.seconds, 3),
                "cache_hit": self.cache_hit, "key": self.key}


@dataclass(frozen=True)
class ConvertPlan:
    source: Source
    target: str
    compression: squashfs.Compression
    source_digest: str
    key: str
    output: Path | None
    deffile: str  # the definition apptainer records for such a source
    provenance: str  # Enroot's ``# enroot-provenance:`` value ("" for none): where the image came from


def deffile_text(source: Source) -> str:
    agent, ref = bootstrap(source)
    return f"bootstrap: {agent}\nfrom: {ref}\n\n"


def provenance(source: Source) -> str:
    """What ``enroot import`` of the same image records in ``/etc/rc``: its URI for a registry
    (``docker://REGISTRY#IMAGE:TAG``) or an engine (``dockerd://IMAGE``); nothing for a docker save tar or an
    OCI layout, which enroot cannot import (and whose host path is nobody else's business)."""
    if isinstance(source, DaemonSource):
        return f"dockerd://{source.ref}"
    if isinstance(source, (DockerArchiveSource, OciLayoutSource)):
        return ""
    from ..registry.reference import parse

    ref = parse(source.image_ref)
    where = f"@{ref.digest}" if ref.digest else f":{ref.tag or 'latest'}"
    return f"docker://{ref.api_host}#{ref.repository}{where}"


def bootstrap(source: Source) -> tuple[str, str]:
    """Apptainer's bootstrap agent and ``from:`` for this kind of source."""
    if isinstance(source, DaemonSource):
        return "docker-daemon", source.ref
    if isinstance(source, DockerArchiveSource):
        return "docker-archive", str(source.path)
    if isinstance(source, OciLayoutSource):
        return source.agent, f"{source.path}:{source.tag}" if source.tag else str(source.path)
    return "docker", source.image_ref


def plan(source: str | Source, target: str, *, output: Path | None = None, compress: str | None = None,
         site: Site | None = None, insecure: bool = False, ca_file: Path | None = None) -> ConvertPlan:
    """Check the request and identify the image (a cheap read: manifest/config or the engine's image ID).
    ``source`` is a SOURCE string, or a :class:`~.source.Source` a caller converts more than once."""
    if target not in TARGETS:
        raise ConfigError(f"--to {target!r}: unknown target", hint="use --to sif or --to sqsh")
    allowed = site.squashfs_compressions if site is not None else ()
    compression = squashfs.choose(compress, allowed, target=target, site_name=site.name if site is not None else "")
    src = source if isinstance(source, Source) else parse_source(source, insecure=insecure, ca_file=ca_file)
    if output is not None:  # before any work: never replace a device, a folder or the input itself
        check_output(output, inputs=input_paths(src), flag="-o")
    digest = src.identify().digest
    deffile, origin = deffile_text(src), provenance(src)
    # what lands in the bytes besides the layers: the deffile (sif) or the provenance line (sqsh)
    key = store_mod.make_key(source_digest=digest, target=target, compression=compression.label,
                             origin=deffile if target == "sif" else origin)
    return ConvertPlan(src, target, compression, digest, key, Path(output) if output else None, deffile, origin)


def input_paths(source: Source) -> list[Path]:
    """The files a source reads (an output must not be one of them)."""
    return [source.path] if isinstance(source, (DockerArchiveSource, OciLayoutSource)) else []


def verifier(target: str):  # type: ignore[no-untyped-def]
    """The check an artifact passes before it is published or served from the store."""
    if target == "sqsh":
        return squashfs.check

    def check_sif(path: Path) -> None:
        from .sif import read_sif

        sif = read_sif(path)
        part = sif.primary_partition()
        if part is None:
            raise ConvertError(f"{path}: the SIF has no primary partition")
        squashfs.check(path, part.offset)

    return check_sif


def execute(p: ConvertPlan, store: store_mod.Store | None = None, progress: Reporter = SILENT) -> ConvertResult:
    started = time.monotonic()
    store = store or store_mod.Store()
    check = verifier(p.target)
    entry = store.get(p.key, p.target, check)
    hit = entry is not None
    if entry is None:
        with store.lock(p.key):
            entry = store.get(p.key, p.target, check)  # someone else may have made it meanwhile
            hit = entry is not None
            if entry is None:
                entry = _produce(p, store, check, progress)
    path = entry.path
    if p.output is not None:
        path = store_mod.export(entry.path, p.output)
    return ConvertResult(path, p.target, p.source_digest, p.compression.label, path.stat().st_size,
                         time.monotonic() - started, hit, p.key)


def convert(source: str | Source, target: str, *, output: Path | None = None, compress: str | None = None,
            site: Site | None = None, store: store_mod.Store | None = None, insecure: bool = False,
            ca_file: Path | None = None, progress: Reporter = SILENT) -> ConvertResult:
    """Convert ``source`` (a SOURCE string) to ``target`` ("sif" or "sqsh"), via the store; ``progress``
    draws the reading of the layers and the writing of the squashfs."""
    return execute(plan(source, target, output=output, compress=compress, site=site, insecure=insecure,
                        ca_file=ca_file), store, progress)


def source_date_epoch() -> int | None:
    return limits.source_date_epoch()


def _created(config_blob: dict[str, Any]) -> int:
    text = str(config_blob.get("created") or "")
    try:
        return int(dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC).timestamp())
    except ValueError:
        return 0


def _read_layers(p: ConvertPlan, work: Path, progress: Reporter) -> tuple[dict[str, Any], ImageConfig, list[Any]]:
    """The image config (parsed) and its layers, verified and ready to index; the total is not known ahead
    (an engine's save has no size), so the meter counts bytes without one."""
    with progress.meter("reading layers") as reading:
        mat = p.source.materialize(work, reading)
        blob = parse_json(mat.config, f"{p.source.text}: the image config", error=ConvertError)
        config = ImageConfig.from_image_config(blob, f"{p.source.text}: the image config")
        return blob, config, prepare_all(mat.layers, work, reading)


def _produce(p: ConvertPlan, store: store_mod.Store, check, progress: Reporter) -> store_mod.Entry:  # type: ignore[no-untyped-def]
    store.clean_temps(p.key)
    with store.workdir(p.key) as work:
        blob, config, layers = _read_layers(p, work, progress)
        epoch = source_date_epoch()
        mtime = epoch if epoch is not None else _created(blob)
        if p.target == "sqsh":
            from . import charliecloud_rootfs, enroot_rootfs

            additions = [*enroot_rootfs.entries(config, provenance=p.provenance), *charliecloud_rootfs.entries(config)]
            own = Ownership(all_root=True, fixperms=True)
        else:
            from . import apptainer_rootfs

            additions = apptainer_rootfs.entries(config, deffile=p.deffile, source_date_epoch=epoch)
            own = Ownership()
        tree = flatten(layers, additions, mtime=mtime)
        temp = store.temp_path(p.key, p.target)
        try:
            squash = temp if p.target == "sqsh" else work / "rootfs.squashfs"
            with progress.meter(f"writing .{p.target} ({p.compression.label})", total=tree.total_bytes()) as packing:
                squashfs.build(squash, p.compression, tree, own, mkfs_time=epoch or 0, progress=packing)
            if p.target == "sif":
                from . import apptainer_rootfs
                from .sif import write_apptainer_sif

                write_apptainer_sif(temp, deffile=p.deffile.encode(), squashfs=squash, arch=config.architecture,
                                    oci_config=apptainer_rootfs.oci_config_json(config))
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        meta = {"source": p.source.text, "source_digest": p.source_digest, "target": p.target,
                "compression": p.compression.label, "created": int(time.time())}
    # Published only once the scratch folder is gone: a kill from here on leaves at most the temp file, which
    # the next producer removes; a kill after publishing would otherwise leave a folder no cache hit cleans.
    return store.publish(p.key, p.target, temp, meta, check)
