"""``ckit inspect``: what a ``.sif`` or Enroot ``.sqsh`` holds, as one report (dict) and as readable text.

The SIF header and descriptors are decoded in Python; files inside a squashfs are read with
``unsquashfs -o OFFSET -cat`` (nothing is extracted to disk).
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import struct
from pathlib import Path
from typing import Any

from .. import process
from ..config.jsondoc import parse as parse_json
from ..errors import CommandFailed, ConfigError, ConvertError
from ..outside import shown
from .sif import text as T
from .sif import write as S
from .squashfs.codec import COMPRESSORS

SQUASHFS_MAGIC = b"hsqs"
_SUPERBLOCK = struct.Struct("<IIIIIHHHHHHQQ")
BASE_ENV_SCRIPTS = {"01-base.sh", "94-appsbase.sh", "95-apps.sh", "99-base.sh", "99-runtimevars.sh"}
# Enroot's files, then Charliecloud's (ch-run --set-env reads /ch/environment): what a .sqsh carries for its runtimes
SQSH_FILES = ("/etc/rc", "/etc/rc.local", "/etc/environment", "/etc/fstab", "/ch/environment", "/ch/metadata.json")


def detect(path: Path) -> str:
    """``"sif"`` or ``"sqsh"`` from the file's first bytes; ConfigError (exit 2) for anything else."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open, a device never end
            raise ConfigError(f"{path}: not a regular file", hint="give a .sif or .sqsh file")
        with open(path, "rb") as src:
            head = src.read(2048)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from err
    if S.is_sif(head):
        return "sif"
    if head.startswith(SQUASHFS_MAGIC):
        return "sqsh"
    raise ConfigError(f"{path}: neither a SIF image nor a squashfs (.sqsh) file",
                      hint="give a .sif written by apptainer/singularity/ckit or a squashfs from enroot/ckit")


def squashfs_offset(path: Path) -> int | None:
    """Where the root file system's squashfs starts in a ``.sif`` or ``.sqsh`` (None: a SIF without one)."""
    if detect(path) == "sqsh":
        return 0
    part = S.read_sif(path).primary_partition()
    return part.offset if part is not None and part.fstype == S.FS_SQUASHFS else None


def superblock(path: Path, offset: int = 0) -> dict[str, Any]:
    """Facts from the squashfs v4 superblock at ``offset``."""
    with open(path, "rb") as src:
        src.seek(offset)
        raw = src.read(_SUPERBLOCK.size)
    if len(raw) < _SUPERBLOCK.size or raw[:4] != SQUASHFS_MAGIC:
        raise ConvertError(f"{path}: no squashfs superblock at offset {offset}")
    (_, inodes, mkfs_time, block_size, fragments, compression, _, flags, ids, major, minor, _,
     bytes_used) = _SUPERBLOCK.unpack(raw)
    return {
        "version": f"{major}.{minor}", "compression": COMPRESSORS.get(compression, f"unknown ({compression})"),
        "block_size": block_size, "inodes": inodes, "fragments": fragments, "ids": ids, "bytes_used": bytes_used,
        "created": dt.datetime.fromtimestamp(mkfs_time, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "data_compressed": not flags & 0x0002, "exportable": bool(flags & 0x0080), "xattrs": not flags & 0x0200,
    }


MAX_SHOWN = 1 << 20  # bytes of one file inside an image that inspect shows


class _TooLarge(Exception):
    pass


class SquashReader:
    """Reads single files of a squashfs (standalone or embedded at ``offset``) through ``unsquashfs``."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        process.require("unsquashfs", purpose="read files inside a squashfs", package="squashfs-tools")
        self.path, self.offset = path, offset

    def _argv(self, *args: str) -> list[str]:
        return ["unsquashfs", "-o", str(self.offset), *args]

    def cat(self, inner: str, limit: int = MAX_SHOWN) -> str | None:
        """The text of ``inner`` (absolute path in the image), or None when it is absent. At most ``limit``
        bytes are read: a hostile image's /etc/rc may be gigabytes of holes."""
        try:
            with process.stream_stdout(self._argv("-cat", str(self.path), inner.lstrip("/")),
                                       step=f"read {inner}") as proc:
                data = proc.stdout.read(limit + 1)  # type: ignore[union-attr]
                if len(data) > limit:
                    raise _TooLarge
                proc.stdout.read()  # type: ignore[union-attr]
        except _TooLarge:
            return f"(more than {limit} bytes: not shown)"
        except CommandFailed:
            return None
        return data.decode(errors="replace")

    def listdir(self, inner: str) -> list[str]:
        """Absolute paths directly inside the directory ``inner``."""
        listing = process.run(self._argv("-l", "-d", "", str(self.path), inner.strip("/")), check=False).stdout
        prefix = "/" + inner.strip("/") + "/"
        names = [line if line.startswith("/") else "/" + line for line in listing.splitlines()]
        return sorted(n for n in names if n.startswith(prefix) and "/" not in n[len(prefix):])

    def superblock_text(self) -> list[str]:
        out = process.run(self._argv("-s", str(self.path)), step="read the squashfs superblock").stdout
        return [line for line in out.splitlines()[1:] if line.strip()]


def _object_text(sif: S.SifFile, desc: S.SifDescriptor) -> str:
    return sif.read_object(desc, limit=1 << 20).decode(errors="replace")


def inspect_sif(path: Path) -> dict[str, Any]:
    sif = S.read_sif(path)
    report: dict[str, Any] = {
        "file": str(path), "format": "sif", "size": path.stat().st_size, "header": T.header_json(sif),
        "descriptors": [T.descriptor_json(d) for d in sif.descriptors],
    }
    for desc in sif.descriptors:
        if desc.datatype == S.DATA_DEFFILE:
            report["deffile"] = _object_text(sif, desc)
        elif desc.datatype == S.DATA_GENERIC_JSON and desc.name == "oci-config.json":
            try:
                report["oci_config"] = parse_json(sif.read_object(desc, limit=1 << 20), "oci-config.json",
                                                  expect=None)
            except ConfigError:
                report["oci_config"] = _object_text(sif, desc)
    part = sif.primary_partition()
    if part is None:
        report["partition"] = None
        return report
    report["partition"] = {"id": part.id, "offset": part.offset, "size": part.size, "arch": part.arch,
                           "fstype": S.FSTYPE_NAMES.get(part.fstype or 0, "Unknown")}
    if part.fstype != S.FS_SQUASHFS:
        return report
    squash = SquashReader(path, part.offset)
    report["partition"] |= {"superblock": superblock(path, part.offset), "unsquashfs": squash.superblock_text()}
    labels = squash.cat("/.singularity.d/labels.json")
    try:
        report["labels"] = parse_json(labels, "labels.json") if labels else None
    except ConfigError:
        report["labels"] = labels
    report["environment"] = {p: squash.cat(p) for p in squash.listdir("/.singularity.d/env")}
    report["runscript"] = squash.cat("/.singularity.d/runscript")
    return report


def inspect_sqsh(path: Path) -> dict[str, Any]:
    squash = SquashReader(path)
    return {
        "file": str(path), "format": "sqsh", "size": path.stat().st_size, "superblock": superblock(path),
        "unsquashfs": squash.superblock_text(), "files": {name: squash.cat(name) for name in SQSH_FILES},
    }


def inspect(path: Path) -> dict[str, Any]:
    """The whole report for a ``.sif`` or ``.sqsh``; ConfigError (exit 2) for any other file."""
    path = Path(path)
    return inspect_sif(path) if detect(path) == "sif" else inspect_sqsh(path)


# --- text ---------------------------------------------------------------------------------------------------
def _block(title: str, body: str | None) -> str:
    if body is None:
        return f"{title}: (absent)\n"
    if body == "":
        return f"{title}: (empty)\n"
    text = body if body.endswith("\n") else body + "\n"
    return f"{title}:\n" + "".join(f"    {line}".rstrip() + "\n" for line in text.splitlines())


def _superblock_line(sb: dict[str, Any]) -> str:
    data = "" if sb["data_compressed"] else ", data uncompressed"
    return (f"squashfs {sb['version']}, {sb['compression']}{data}, {T.readable_size(sb['block_size'])} blocks, "
            f"{sb['inodes']} inodes, {T.readable_size(sb['bytes_used'])}, created {sb['created']}")


def render_text(report: dict[str, Any]) -> str:
    """The human report of :func:`inspect`."""
    out = [f"{report['file']}: {report['format']} file, {T.readable_size(report['size'])}\n"]
    if report["format"] == "sqsh":
        out.append(f"\nSuperblock: {_superblock_line(report['superblock'])}\n")
        for name, body in report["files"].items():
            out.append("\n" + _block(name, body))
        return "".join(out)
    sif = S.read_sif(Path(report["file"]))
    out += ["\nHeader:\n", *(f"    {line}\n" for line in T.format_header(sif).splitlines()),
            "\nDescriptors:\n", T.format_list(sif)]
    part = report.get("partition")
    if part is None:
        out.append("\nPrimary partition: none (apptainer cannot run this file)\n")
        return "".join(out)
    where = f"\nPrimary partition: object {part['id']} at offset {part['offset']}, {part['arch']}, "
    if "superblock" not in part:
        out.append(f"{where}{part['fstype']} (contents not read)\n")
        return "".join(out)
    out.append(f"{where}{_superblock_line(part['superblock'])}\n")
    if "deffile" in report:
        out.append("\n" + _block("Definition file", report["deffile"]))
    labels = report.get("labels")
    if isinstance(labels, dict):
        rows = sorted((shown(k), shown(v)) for k, v in labels.items())  # one line each, whatever the image says
        width = max((len(k) for k, _ in rows), default=0)
        out.append("\nLabels:\n" + "".join(f"    {k.ljust(width)}  {v}\n" for k, v in rows))
        if not labels:
            out.append("    (none)\n")
    else:
        out.append("\n" + _block("Labels", labels))
    env = report.get("environment") or {}
    shared = [p.rsplit("/", 1)[1] for p in env if p.rsplit("/", 1)[1] in BASE_ENV_SCRIPTS]
    out.append(f"\nEnvironment scripts ({len(env)}; standard: {', '.join(shared) or 'none'}):\n")
    for name, body in env.items():
        if name.rsplit("/", 1)[1] not in BASE_ENV_SCRIPTS:
            out.append(_block(f"  {name}", body))
    out.append("\n" + _block("Runscript", report.get("runscript")))
    return "".join(out)
