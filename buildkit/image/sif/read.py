"""SIF v01 reader: the global header and descriptors of a SIF file, every field checked against the file.

A SIF file is untrusted input (``ckit inspect``, ``ckit push``): a descriptor whose offset or size is negative
or points past the end of the file, or a descriptor table larger than the file, is a ConvertError naming the
file, before any object is read; object reads are capped by the caller.
"""

from __future__ import annotations

import os
import struct
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ...errors import ConvertError
from .format import (
    _CRYPTO,
    _DESCRIPTOR,
    _HEADER,
    _PARTITION,
    _SBOM,
    _SIGNATURE,
    ARCH_NAMES,
    CHUNK,
    DATA_CRYPTO_MESSAGE,
    DATA_OCI_BLOB,
    DATA_OCI_ROOT_INDEX,
    DATA_PARTITION,
    DATA_SBOM,
    DATA_SIGNATURE,
    DATATYPE_NAMES,
    DESCRIPTOR_SIZE,
    GROUP_MASK,
    HEADER_SIZE,
    MAGIC,
    PART_PRIMSYS,
    VERSION,
)

MAX_OBJECT = 64 << 20  # bytes of an object read into memory (definition, JSON, signatures: a few KiB)


@dataclass(frozen=True)
class SifDescriptor:
    """One used descriptor, every field decoded."""

    datatype: int
    id: int
    group_raw: int
    linked_raw: int
    offset: int
    size: int
    size_with_padding: int
    created: int
    modified: int
    uid: int
    gid: int
    name: str
    extra: bytes = field(repr=False)

    @property
    def datatype_name(self) -> str:
        return DATATYPE_NAMES.get(self.datatype, f"Unknown data-type {self.datatype:#x}")

    @property
    def group(self) -> int:
        """Group ID, 0 for "no group"."""
        return self.group_raw & ~GROUP_MASK

    @property
    def linked_id(self) -> int:
        return self.linked_raw & ~GROUP_MASK

    @property
    def linked_to_group(self) -> bool:
        return bool(self.linked_raw & GROUP_MASK)

    def _int(self, fmt: struct.Struct, index: int) -> int | None:
        return fmt.unpack_from(self.extra)[index]

    @property
    def fstype(self) -> int | None:
        return self._int(_PARTITION, 0) if self.datatype == DATA_PARTITION else None

    @property
    def parttype(self) -> int | None:
        return self._int(_PARTITION, 1) if self.datatype == DATA_PARTITION else None

    @property
    def arch(self) -> str | None:
        if self.datatype != DATA_PARTITION:
            return None
        code = _PARTITION.unpack_from(self.extra)[2].rstrip(b"\0").decode(errors="replace")
        return ARCH_NAMES.get(code, "unknown")

    @property
    def hashtype(self) -> int | None:
        return self._int(_SIGNATURE, 0) if self.datatype == DATA_SIGNATURE else None

    @property
    def entity(self) -> str | None:
        """Signer fingerprint (upper-case hex of Entity[0:20]) for signatures."""
        if self.datatype != DATA_SIGNATURE:
            return None
        return _SIGNATURE.unpack_from(self.extra)[1][:20].hex().upper()

    @property
    def formattype(self) -> int | None:
        return self._int(_CRYPTO, 0) if self.datatype == DATA_CRYPTO_MESSAGE else None

    @property
    def messagetype(self) -> int | None:
        return self._int(_CRYPTO, 1) if self.datatype == DATA_CRYPTO_MESSAGE else None

    @property
    def sbom_format(self) -> int | None:
        return self._int(_SBOM, 0) if self.datatype == DATA_SBOM else None

    @property
    def digest(self) -> str | None:
        if self.datatype not in (DATA_OCI_ROOT_INDEX, DATA_OCI_BLOB):
            return None
        return self.extra.rstrip(b"\0").decode(errors="replace")


@dataclass(frozen=True)
class SifFile:
    """The global header plus the used descriptors of a SIF file."""

    path: Path
    launch_script: bytes
    version: str
    arch_code: str
    id: bytes
    created: int
    modified: int
    descriptors_free: int
    descriptors_total: int
    descriptors_offset: int
    descriptors_size: int
    data_offset: int
    data_size: int
    descriptors: tuple[SifDescriptor, ...]

    @property
    def arch(self) -> str:
        return ARCH_NAMES.get(self.arch_code, "unknown")

    @property
    def uuid(self) -> str:
        return str(uuidlib.UUID(bytes=self.id))

    def primary_partition(self) -> SifDescriptor | None:
        return next((d for d in self.descriptors if d.datatype == DATA_PARTITION and d.parttype == PART_PRIMSYS),
                    None)

    def descriptor(self, object_id: int) -> SifDescriptor:
        for d in self.descriptors:
            if d.id == object_id:
                return d
        raise ConvertError(f"{self.path}: no SIF object with ID {object_id}")

    def read_object(self, desc: SifDescriptor, limit: int | None = None) -> bytes:
        """The data of a (small) object; ``limit`` caps the bytes read. Without a limit, an object larger than
        MAX_OBJECT is an error (stream it with :meth:`copy_object`)."""
        if limit is None and desc.size > MAX_OBJECT:
            raise ConvertError(f"{self.path}: SIF object {desc.id} is {desc.size} bytes, too large to read whole")
        with open(self.path, "rb") as src:
            src.seek(desc.offset)
            return src.read(desc.size if limit is None else min(limit, desc.size))

    def copy_object(self, desc: SifDescriptor, out: BinaryIO) -> None:
        """Stream an object's data into ``out``."""
        with open(self.path, "rb") as src:
            src.seek(desc.offset)
            remaining = desc.size
            while remaining:
                block = src.read(min(CHUNK, remaining))
                if not block:
                    raise ConvertError(f"{self.path}: object {desc.id} runs past the end of the file")
                out.write(block)
                remaining -= len(block)


def is_sif(head: bytes) -> bool:
    """Whether a file's first bytes carry the SIF magic (apptainer's detection: in the first 2048 bytes)."""
    return b"SIF_MAGIC" in head[:2048]


def read_sif(path: Path | str) -> SifFile:
    """Read and decode the header and descriptors of ``path``; ConvertError names the file on bad input."""
    path = Path(path)
    try:
        with open(path, "rb") as src:
            file_size = os.fstat(src.fileno()).st_size
            raw = src.read(HEADER_SIZE)
            if len(raw) < HEADER_SIZE:
                raise ConvertError(f"{path}: not a SIF file (only {len(raw)} bytes)")
            (launch, magic, version, arch, image_id, created, modified, free, total, doff, dsize, data_offset,
             data_size) = _HEADER.unpack(raw)
            if magic != MAGIC:
                raise ConvertError(f"{path}: not a SIF file (bad magic {magic!r})",
                                   hint="give a .sif written by apptainer, singularity or ckit")
            if version != VERSION:
                shown = version.rstrip(b"\0").decode(errors="replace")
                raise ConvertError(f"{path}: unsupported SIF version {shown!r}",
                                   hint="ckit reads SIF version 01")
            if not 0 <= total <= 65536 or doff < HEADER_SIZE:
                raise ConvertError(f"{path}: corrupt SIF header ({total} descriptors at offset {doff})")
            if doff > file_size - total * DESCRIPTOR_SIZE:
                raise ConvertError(f"{path}: SIF descriptor table is truncated")
            src.seek(doff)
            table = src.read(total * DESCRIPTOR_SIZE)
            if len(table) != total * DESCRIPTOR_SIZE:
                raise ConvertError(f"{path}: SIF descriptor table is truncated")
    except OSError as err:
        raise ConvertError(f"{path}: cannot read: {err.strerror or err}") from err
    descriptors = []
    for (datatype, used, obj_id, group, linked, offset, size, padded, ctime, mtime, uid, gid, name,
         extra) in _DESCRIPTOR.iter_unpack(table):
        if not used:
            continue
        if not (0 <= offset <= file_size and 0 <= size <= file_size - offset):
            raise _corrupt(path, f"object {obj_id} claims bytes {offset} to {offset + size} of a "
                                 f"{file_size}-byte file")
        descriptors.append(SifDescriptor(datatype, obj_id, group, linked, offset, size, padded, ctime, mtime,
                                         uid, gid, name.rstrip(b"\0").decode(errors="replace"), extra))
    return SifFile(path, launch.rstrip(b"\0"), version.rstrip(b"\0").decode(errors="replace"),
                   arch.rstrip(b"\0").decode(errors="replace"), image_id, created, modified, free, total, doff, dsize,
                   data_offset, data_size, tuple(descriptors))


def _corrupt(path: Path, why: str) -> ConvertError:
    return ConvertError(f"{path}: corrupt SIF file: {why}", hint="the file is damaged, truncated or hostile")
