"""Human text for SIF headers and descriptors, in the layout of the reference ``siftool header/list/info``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal

from . import write as S

RULE = "-" * 78


def readable_size(size: int) -> str:
    """1024-based size rounded to a whole unit: ``27 KiB``, ``0 B``."""
    if size < 1024:
        return f"{size} B"
    div, exp = 1024, 0
    while size // div >= 1024 and exp < 5:
        div *= 1024
        exp += 1
    whole = (Decimal(size) / Decimal(div)).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return f"{whole} {'KMGTPE'[exp]}iB"


def format_time(seconds: int) -> str:
    """Go's ``time.Time.String()`` in UTC, e.g. ``2020-06-30 00:01:56 +0000 UTC``; a time outside the years
    1-9999 (a damaged or hostile header) is shown as the raw number of seconds."""
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
    except (OverflowError, OSError, ValueError):
        return f"{seconds} s since 1970 (out of range)"


def _table(rows: Sequence[tuple[str, str]], padding: int) -> str:
    width = max(len(key) for key, _ in rows) + padding
    return "".join(f"{key.ljust(width)}{value}\n" for key, value in rows)


def header_rows(sif: S.SifFile) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if sif.launch_script:
        rows.append(("Launch Script:", sif.launch_script.decode(errors="replace").strip()))
    rows.append(("Version:", sif.version))
    if sif.arch != "unknown":
        rows.append(("Primary Architecture:", sif.arch))
    if any(sif.id):
        rows.append(("ID:", sif.uuid))
    if sif.created != S.GO_ZERO_TIME:
        rows.append(("Created At:", format_time(sif.created)))
    if sif.modified != S.GO_ZERO_TIME:
        rows.append(("Modified At:", format_time(sif.modified)))
    rows += [
        ("Descriptors Free:", str(sif.descriptors_free)),
        ("Descriptors Total:", str(sif.descriptors_total)),
        ("Descriptors Offset:", str(sif.descriptors_offset)),
        ("Descriptors Size:", readable_size(sif.descriptors_size)),
        ("Data Offset:", str(sif.data_offset)),
        ("Data Size:", readable_size(sif.data_size)),
    ]
    return rows


def format_header(sif: S.SifFile) -> str:
    return _table(header_rows(sif), 1)


def type_label(d: S.SifDescriptor) -> str:
    """The TYPE column of ``siftool list``: ``FS (Squashfs/*System/amd64)``, ``Signature (SHA-256)``."""
    if d.datatype == S.DATA_PARTITION:
        return (f"FS ({S.FSTYPE_NAMES.get(d.fstype or 0, 'Unknown')}/"
                f"{S.PARTTYPE_NAMES.get(d.parttype or 0, 'Unknown')}/{d.arch})")
    if d.datatype == S.DATA_SIGNATURE:
        return f"Signature ({S.HASHTYPE_NAMES.get(d.hashtype or 0, 'Unknown')})"
    if d.datatype == S.DATA_CRYPTO_MESSAGE:
        return (f"Cryptographic Message ({S.FORMATTYPE_NAMES.get(d.formattype or 0, 'Unknown')}/"
                f"{S.MESSAGETYPE_NAMES.get(d.messagetype or 0, 'Unknown')})")
    if d.datatype == S.DATA_SBOM:
        return f"SBOM ({S.SBOM_FORMAT_NAMES.get(d.sbom_format or 0, 'Unknown')})"
    return d.datatype_name


def group_label(d: S.SifDescriptor) -> str:
    return str(d.group) if d.group else "NONE"


def link_label(d: S.SifDescriptor, width: int = 0) -> str:
    if not d.linked_raw:
        return "NONE"
    return f"{str(d.linked_id).ljust(width)} (G)" if d.linked_to_group else str(d.linked_id)


def format_list(sif: S.SifFile) -> str:
    lines = [RULE, "ID   |GROUP   |LINK    |SIF POSITION (start-end)  |TYPE", RULE]
    for d in sif.descriptors:
        position = f"{d.offset}-{d.offset + d.size}"
        lines.append(f"{d.id:<4} |{group_label(d):<7} |{link_label(d, 3):<7} |{position:<26}|{type_label(d)}")
    return "\n".join(lines) + "\n"


def info_rows(d: S.SifDescriptor) -> list[tuple[str, str]]:
    rows = [("Data Type:", d.datatype_name), ("ID:", str(d.id)), ("Group ID:", group_label(d)),
            ("Linked ID:", link_label(d)), ("Offset:", str(d.offset)), ("Size:", str(d.size))]
    if d.created != S.GO_ZERO_TIME:
        rows.append(("Created At:", format_time(d.created)))
    if d.modified != S.GO_ZERO_TIME:
        rows.append(("Modified At:", format_time(d.modified)))
    if d.name:
        rows.append(("Name:", d.name))
    if d.datatype == S.DATA_PARTITION:
        rows += [("Filesystem Type:", S.FSTYPE_NAMES.get(d.fstype or 0, "Unknown")),
                 ("Partition Type:", S.PARTTYPE_NAMES.get(d.parttype or 0, "Unknown")),
                 ("Architecture:", d.arch or "unknown")]
    elif d.datatype == S.DATA_SIGNATURE:
        rows += [("Hash Type:", S.HASHTYPE_NAMES.get(d.hashtype or 0, "Unknown")), ("Entity:", d.entity or "")]
    elif d.datatype == S.DATA_CRYPTO_MESSAGE:
        rows += [("Format Type:", S.FORMATTYPE_NAMES.get(d.formattype or 0, "Unknown")),
                 ("Message Type:", S.MESSAGETYPE_NAMES.get(d.messagetype or 0, "Unknown"))]
    elif d.datatype == S.DATA_SBOM:
        rows.append(("Format:", S.SBOM_FORMAT_NAMES.get(d.sbom_format or 0, "Unknown")))
    elif d.digest is not None:
        rows.append(("Digest:", d.digest))
    return rows


def format_info(d: S.SifDescriptor) -> str:
    return _table([(f"  {key}", value) for key, value in info_rows(d)], 2)


def descriptor_json(d: S.SifDescriptor) -> dict[str, object]:
    """Every decoded descriptor field, for ``--json`` output."""
    doc: dict[str, object] = {
        "id": d.id, "datatype": d.datatype, "type": d.datatype_name, "label": type_label(d),
        "group": d.group or None, "linked": d.linked_id or None, "linked_to_group": d.linked_to_group,
        "offset": d.offset, "size": d.size, "size_with_padding": d.size_with_padding,
        "created": d.created, "modified": d.modified, "uid": d.uid, "gid": d.gid, "name": d.name,
    }
    if d.datatype == S.DATA_PARTITION:
        doc["partition"] = {"fstype": S.FSTYPE_NAMES.get(d.fstype or 0, "Unknown"),
                            "parttype": S.PARTTYPE_NAMES.get(d.parttype or 0, "Unknown"), "arch": d.arch}
    if d.datatype == S.DATA_SIGNATURE:
        doc["signature"] = {"hashtype": S.HASHTYPE_NAMES.get(d.hashtype or 0, "Unknown"), "entity": d.entity}
    if d.digest is not None:
        doc["digest"] = d.digest
    return doc


def header_json(sif: S.SifFile) -> dict[str, object]:
    return {
        "launch_script": sif.launch_script.decode(errors="replace"), "version": sif.version, "arch": sif.arch,
        "id": sif.uuid, "created": sif.created, "modified": sif.modified,
        "descriptors_free": sif.descriptors_free, "descriptors_total": sif.descriptors_total,
        "descriptors_offset": sif.descriptors_offset, "descriptors_size": sif.descriptors_size,
        "data_offset": sif.data_offset, "data_size": sif.data_size,
    }
