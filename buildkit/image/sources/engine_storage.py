"""An image's layers read where podman keeps them, instead of through ``podman save``.

podman's image save writes the whole archive to a temporary file before it sends the first byte, so streaming
it cannot overlap with anything: for a 349 MB image it takes 4x the time of converting from an archive on disk.
podman (containers-storage, overlay driver) keeps each layer as a directory of its files plus a
*tar-split* record (``overlay-layers/<id>.tar-split.gz``: the tar's headers and padding verbatim, and for each
file its name and size), which is exactly what ``save`` reassembles the layer from. ckit reassembles it the same
way, into its work folder, and checks the result against the image config's ``rootfs.diff_ids`` (and the config
against the image ID) before anything counts, so what it reads is byte for byte what ``save`` would send.

It does so only when the engine is podman behind a local socket and its storage can be read by this user (root
for a rootful podman; rootless podman's storage belongs to the user but holds files owned by sub-uids that it
cannot always read). Anything unexpected (another driver, a missing tar-split, an unreadable file, a digest that
does not match) falls back to ``save``. Files are opened one directory at a time without following symlinks,
so a layer's symlinks can never make ckit read outside the layer's directory.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import logging
import os
import stat
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConvertError

log = logging.getLogger("ckit.engine_storage")

MAX_JSON = 64 << 20  # layers.json / images.json of a store with thousands of images stay far below
MAX_LINE = 1 << 20  # one tar-split entry: a header with PAX records, base64-encoded
CHUNK = 1 << 20
O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
DRIVERS = {"overlay": "overlay/{id}/diff"}


class Unreadable(ConvertError):  # noqa: N818 - ckit then falls back to the engine's save
    pass


@dataclass(frozen=True)
class StoredLayer:
    diff_id: str
    size: int  # of the uncompressed tar
    files: Path  # the layer's directory of files
    tar_split: Path


@dataclass(frozen=True)
class StoredImage:
    config: bytes
    layers: list[StoredLayer]


def _json(path: Path) -> Any:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_JSON + 1)
        if len(data) > MAX_JSON:
            raise Unreadable(f"{path} is too large")
        return json.loads(data)
    except (OSError, ValueError) as err:
        raise Unreadable(f"{path}: {err}") from err


def locate(server: str, address: str, attrs: dict[str, Any], image_id: str) -> StoredImage | None:
    """The image in podman's storage, when the engine is a local podman (``server``, ``address`` and the image's
    inspect ``attrs`` as the engine reports them) whose storage this user can read; else None."""
    driver = attrs.get("GraphDriver") or {}
    upper = str((driver.get("Data") or {}).get("UpperDir") or "")
    name = str(driver.get("Name") or "")
    if not server.startswith("podman") or not address.startswith("unix://") or name not in DRIVERS \
            or not upper.endswith("/diff"):
        return None
    try:
        return find(Path(upper).parents[2], name, image_id)
    except Unreadable as err:
        log.info("reading the layers through the engine's save: %s", err.message)
        return None


def find(graphroot: Path, driver: str, image_id: str) -> StoredImage:
    """The image ``image_id`` (``sha256:…``, podman's ID is its config digest) in the store at ``graphroot``,
    with its config checked against the ID and its layer chain against the config's diff_ids."""
    pattern = DRIVERS.get(driver)
    algorithm, _, hexid = image_id.partition(":")
    if pattern is None or algorithm != "sha256" or len(hexid) != 64:
        raise Unreadable(f"storage driver {driver!r} or image ID {image_id!r} not handled")
    images = _json(graphroot / f"{driver}-images" / "images.json")
    entry = next((i for i in images if isinstance(i, dict) and i.get("id") == hexid), None) if isinstance(
        images, list) else None
    if entry is None:
        raise Unreadable(f"image {hexid[:12]} is not in {graphroot}")
    key = base64.b64encode(image_id.encode()).decode()
    try:
        config = (graphroot / f"{driver}-images" / hexid / f"={key}").read_bytes()
    except OSError as err:
        raise Unreadable(f"the config of {hexid[:12]}: {err}") from err
    if hashlib.sha256(config).hexdigest() != hexid:
        raise Unreadable(f"the stored config of {hexid[:12]} does not match the image ID")
    return StoredImage(config, _chain(graphroot, driver, pattern, str(entry.get("layer") or ""), config))


def _chain(graphroot: Path, driver: str, pattern: str, top: str, config: bytes) -> list[StoredLayer]:
    known = _json(graphroot / f"{driver}-layers" / "layers.json")
    by_id = {layer.get("id"): layer for layer in known if isinstance(layer, dict)} if isinstance(known, list) else {}
    chain: list[dict[str, Any]] = []
    current = by_id.get(top) if top else None
    while current is not None and len(chain) <= len(by_id):
        chain.append(current)
        current = by_id.get(current.get("parent")) if current.get("parent") else None
    chain.reverse()
    rootfs = json.loads(config).get("rootfs") or {}
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or [layer.get("diff-digest") for layer in chain] != diff_ids:
        raise Unreadable("the stored layer chain does not match the config's diff_ids")
    layers = []
    for layer in chain:
        layer_id, size = str(layer.get("id")), layer.get("diff-size")
        if not layer_id.isalnum() or not isinstance(size, int) or size < 0:
            raise Unreadable(f"layer {layer_id[:12]}: no id or size")
        files = graphroot / pattern.format(id=layer_id)
        tar_split = graphroot / f"{driver}-layers" / f"{layer_id}.tar-split.gz"
        if not os.access(files, os.R_OK | os.X_OK) or not os.access(tar_split, os.R_OK):
            raise Unreadable(f"layer {layer_id[:12]}: its files or tar-split cannot be read")
        layers.append(StoredLayer(str(layer["diff-digest"]), size, files, tar_split))
    return layers


class _Dirs:
    """Directory descriptors below a layer's root, opened component by component without following links."""

    def __init__(self, root: Path) -> None:
        self.root = os.open(root, O_DIR)
        self._open: OrderedDict[str, int] = OrderedDict()

    def fd(self, parts: list[str]) -> int:
        key = "/".join(parts)
        if key in self._open:
            self._open.move_to_end(key)
            return self._open[key]
        fd = self.root if not parts else os.open(parts[-1], O_DIR, dir_fd=self.fd(parts[:-1]))
        if parts:
            self._open[key] = fd
            while len(self._open) > 64:
                os.close(self._open.popitem(last=False)[1])
        return fd

    def close(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        os.close(self.root)


def _parts(name: str) -> list[str]:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise Unreadable(f"tar-split names {name!r}, not a path inside the layer")
    return parts


def _file(dirs: _Dirs, name: str, size: int) -> Iterator[bytes]:
    parts = _parts(name)
    fd = os.open(parts[-1], O_FILE, dir_fd=dirs.fd(parts[:-1]))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise Unreadable(f"{name}: not a regular file of {size} bytes in the layer's directory")
        left = size
        while left:
            chunk = os.read(fd, min(CHUNK, left))
            if not chunk:
                raise Unreadable(f"{name}: shorter than {size} bytes")
            left -= len(chunk)
            yield chunk
    finally:
        os.close(fd)


def assemble(layer: StoredLayer) -> Iterator[bytes]:
    """The layer's tar, byte for byte, in chunks of about :data:`CHUNK`, from its tar-split record and its files
    (raises Unreadable)."""
    return _joined(_pieces(layer))


def _joined(pieces: Iterator[bytes], size: int = CHUNK) -> Iterator[bytes]:
    """Small pieces (512-byte headers, padding, small files) joined into chunks of about ``size``, in order: the
    reader then makes one write and wakes the precompressor once per chunk, not three times per file (measured: a
    353 MB layer of small files took 1.85x the time of its archive, most of it in those writes and wake-ups)."""
    pending: list[bytes] = []
    held = 0
    for piece in pieces:
        if held and held + len(piece) > size:
            yield b"".join(pending)
            pending, held = [], 0
        if len(piece) >= size:
            yield piece
        elif piece:
            pending.append(piece)
            held += len(piece)
    if pending:
        yield b"".join(pending)


def _pieces(layer: StoredLayer) -> Iterator[bytes]:
    """The layer's tar piece by piece: headers and padding from the tar-split record, file data from the files."""
    try:
        dirs = _Dirs(layer.files)
    except OSError as err:
        raise Unreadable(f"{layer.files}: {err}") from err
    try:
        for entry in _entries(layer.tar_split):
            if entry.get("type") == 2:
                yield base64.b64decode(entry.get("payload") or "", validate=True)
            elif entry.get("type") == 1 and entry.get("size"):
                name = entry.get("name")
                if "name_raw" in entry:
                    name = base64.b64decode(entry["name_raw"]).decode("utf-8", "surrogateescape")
                yield from _file(dirs, str(name), int(entry["size"]))
    except (OSError, ValueError, binascii.Error, EOFError, TypeError, AttributeError) as err:
        raise Unreadable(f"{layer.tar_split}: {err}") from err
    finally:
        dirs.close()


def _entries(path: Path) -> Iterator[dict[str, Any]]:
    """The entries of a tar-split record, parsed a few thousand lines at a time (one JSON document each)."""
    with gzip.open(path, "rb") as f:
        rest = b""
        while chunk := f.read(CHUNK):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            if len(rest) > MAX_LINE:
                raise Unreadable(f"{path}: an entry is too long")
            if lines:
                yield from json.loads(b"[" + b",".join(line for line in lines if line) + b"]")
        if rest.strip():
            yield json.loads(rest)
