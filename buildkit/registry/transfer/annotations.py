"""Manifest annotations that trace a pushed artifact back to the recipe that made it.

| key | value |
|---|---|
| `org.opencontainers.image.created` | RFC 3339 UTC; `SOURCE_DATE_EPOCH` when set, else the SIF header's creation time, else the file's mtime |
| `io.ckit.version` | the ckit version that pushed |
| `io.ckit.stack` | the stack name |
| `io.ckit.parameters` | the resolved parameters, canonical JSON |
| `io.ckit.source.digest` | the digest of the image the artifact was converted from |

Values already recorded in the artifact (labels of a SIF's ``oci-config.json`` under ``io.ckit.*`` and
``org.opencontainers.image.*``; that object is the image config's bare ``config`` part, ``{"Labels": …}``)
are taken over; options given on the command line win.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from ... import __version__
from ...config.jsondoc import parse as parse_json
from ...errors import CkitError, ConfigError
from ...image.sif.read import read_sif
from ...image.sif.write import DATA_GENERIC_JSON
from ...oci.labels import CKIT_PREFIX, CREATED, OCI_PREFIX, PARAMETERS, SOURCE_DIGEST, STACK, VERSION
from ...reproducible import source_date_epoch

_KEPT_PREFIXES = (CKIT_PREFIX, OCI_PREFIX)


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sif_metadata(path: Path) -> tuple[int | None, dict[str, str]]:
    """Creation time and ckit/OCI labels recorded in a SIF (none when it carries none)."""
    try:
        sif = read_sif(path)
    except CkitError:
        return None, {}
    created = sif.created if 0 < sif.created < 1 << 32 else None  # a damaged header may say anything
    labels: dict[str, str] = {}
    for desc in sif.descriptors:
        if desc.datatype == DATA_GENERIC_JSON and desc.name == "oci-config.json" and desc.size < (1 << 20):
            try:
                config = parse_json(sif.read_object(desc), "oci-config.json")
            except CkitError:
                continue
            labels = {k: str(v) for k, v in _sif_labels(config).items() if k.startswith(_KEPT_PREFIXES)}
    return created, labels


def _sif_labels(config: object) -> dict[str, object]:
    """The labels of a SIF's ``oci-config.json``: a bare image ``config`` object (``{"Labels": …}``), which is
    what apptainer and ckit write; a whole image config (``{"config": {"Labels": …}}``) is read too."""
    if not isinstance(config, dict):
        return {}
    for holder in (config, config.get("config"), config.get("Config")):
        if isinstance(holder, dict) and isinstance(holder.get("Labels"), dict):
            return holder["Labels"]
    return {}


def for_artifact(path: Path, kind: str, *, stack: str | None = None, parameters: dict | None = None,
                 source_digest: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    created, recorded = sif_metadata(path) if kind == "sif" else (None, {})
    epoch = source_date_epoch()
    if epoch is None:
        epoch = created if created is not None else int(path.stat().st_mtime)
    values = {**recorded, CREATED: rfc3339(epoch), VERSION: __version__}
    return _merge(values, stack=stack, parameters=parameters, source_digest=source_digest, extra=extra)


def for_image(*, stack: str | None = None, parameters: dict | None = None, source_digest: str | None = None,
              labels: dict[str, str] | None = None, extra: dict[str, str] | None = None,
              created: str | None = None) -> dict[str, str]:
    """Annotations of an image's OCI manifest. ``created`` is the image config's own date: with it (or a
    ``created`` label, or SOURCE_DATE_EPOCH) a repeat push of the same image makes the same manifest."""
    values = {k: v for k, v in (labels or {}).items() if k.startswith(_KEPT_PREFIXES)}
    epoch = source_date_epoch()
    if created:
        values.setdefault(CREATED, created)
    values.setdefault(CREATED, rfc3339(epoch if epoch is not None else int(datetime.now(UTC).timestamp())))
    if epoch is not None:
        values[CREATED] = rfc3339(epoch)
    values[VERSION] = __version__
    return _merge(values, stack=stack, parameters=parameters, source_digest=source_digest, extra=extra)


def _merge(values: dict[str, str], *, stack: str | None, parameters: dict | None, source_digest: str | None,
           extra: dict[str, str] | None) -> dict[str, str]:
    if stack:
        values[STACK] = stack
    if parameters is not None:
        values[PARAMETERS] = json.dumps(parameters, sort_keys=True, separators=(",", ":"))
    if source_digest:
        values[SOURCE_DIGEST] = source_digest
    values.update(extra or {})
    return dict(sorted(values.items()))


def parse_pairs(pairs: list[str] | None, flag: str = "--annotation") -> dict[str, str]:
    result: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {pair!r}: expected KEY=VALUE")
        result[key] = value
    return result
