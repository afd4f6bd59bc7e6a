"""Plan a conversion: check the request, identify the image (a cheap read), choose the compression, and key
the result (what lands in the bytes besides the layers: the deffile or provenance line, and the dates).

Execution (:mod:`.convert`, :mod:`.produce`) happens only on a store miss. ``verifier`` is the check an
artifact passes before it is published or served from the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, ConvertError
from ..fs.files import check_output
from ..reproducible import source_date_epoch
from ..storage import store as store_mod
from .sources.base import Reader, Source
from .sources.docker_archive import DockerArchiveSource
from .sources.docker_daemon import DaemonSource
from .sources.named import parse_source
from .sources.oci import OciLayoutSource
from .sources.registry import RegistrySource
from .squashfs.compression import Compression, choose_for
from .squashfs.superblock import check as check_squashfs

if TYPE_CHECKING:
    from ..site.model import Site

TARGETS = ("sif", "sqsh")


@dataclass(frozen=True)
class ConvertPlan:
    source: Source
    target: str
    compression: Compression
    source_digest: str
    key: str
    output: Path | None
    deffile: str  # the definition apptainer records for such a source
    provenance: str  # Enroot's ``# enroot-provenance:`` value ("" for none): where the image came from
    epoch: int | None = None  # SOURCE_DATE_EPOCH, read once when planning (it is part of the key)
    private: bool = False  # an image fetched with credentials: its artifact is readable by its store's owner only


def deffile_text(source: Source) -> str:
    agent, ref = bootstrap(source)
    return f"bootstrap: {agent}\nfrom: {ref}\n\n"


def provenance(source: Source) -> str:
    """What ``enroot import`` of the same image records in ``/etc/rc`` (enroot after 4.1.2: ``docker::configure``
    writes ``# enroot-provenance: URI`` first): for a registry ``docker://REGISTRY#IMAGE:TAG``, a pinned digest in
    the tag's place (``#IMAGE:sha256:…``, as enroot prints what it parsed, the tag of ``TAG@DIGEST`` dropped); for
    an engine the URI as given (``dockerd://IMAGE``); nothing for a docker save tar or an OCI layout, which enroot
    cannot import (and whose host path is nobody else's business)."""
    if isinstance(source, DaemonSource):
        return f"dockerd://{source.ref}"
    if not isinstance(source, RegistrySource):
        return ""
    ref = source.ref
    return f"docker://{ref.api_host}#{ref.repository}:{ref.digest or ref.tag or 'latest'}"


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
         site: Site | None = None, registry: Reader | None = None) -> ConvertPlan:
    """Check the request and identify the image (a cheap read: manifest/config or the engine's image ID).
    ``source`` is a SOURCE string, or a :class:`~.sources.base.Source` a caller converts more than once;
    ``registry`` reads a ``docker://`` SOURCE (:func:`buildkit.registry.source.reader`)."""
    if target not in TARGETS:
        raise ConfigError(f"--to {target!r}: unknown target", hint="use --to sif or --to sqsh")
    compression = choose_for(compress, site, target)
    src = source if isinstance(source, Source) else parse_source(source, registry=registry)
    if output is not None:  # before any work: never replace a device, a folder or the input itself
        check_output(output, inputs=input_paths(src), flag="-o")
    epoch = source_date_epoch()
    digest = src.identify().digest
    deffile, origin = deffile_text(src), provenance(src)
    # what lands in the bytes besides the layers: the deffile (sif) or the provenance line (sqsh), and the dates
    key = store_mod.make_key(source_digest=digest, target=target, compression=compression.label,
                             origin=deffile if target == "sif" else origin, source_date_epoch=epoch)
    return ConvertPlan(src, target, compression, digest, key, Path(output) if output else None, deffile, origin,
                       epoch, src.private)


def input_paths(source: Source) -> list[Path]:
    """The files a source reads (an output must not be one of them)."""
    return [source.path] if isinstance(source, (DockerArchiveSource, OciLayoutSource)) else []


def verifier(target: str) -> Callable[[Path], object]:
    """The check an artifact passes before it is published or served from the store."""
    if target == "sqsh":
        return check_squashfs

    def check_sif(path: Path) -> None:
        from .sif.read import read_sif

        sif = read_sif(path)
        part = sif.primary_partition()
        if part is None:
            raise ConvertError(f"{path}: the SIF has no primary partition")
        check_squashfs(path, part.offset)

    return check_sif
