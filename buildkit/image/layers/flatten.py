"""Merge image layers into one tree, never extracting anything onto the host.

Two passes. Pass 1 reads every layer's tar *headers* (an uncompressed layer is read in place by seeking;
a compressed one is first decompressed into a spool file) and builds an index: final path → node, where a
regular file's node points at the byte range holding its data. Whiteouts (``.wh.X``), opaque directories
(``.wh..wh..opq``), replacements (file ↔ directory) and hardlinks (also across layers) are resolved on the
index, as overlayfs would show the image. Pass 2 (:mod:`..squashfs.writer`) writes the merged tree as a
squashfs image, reading file data straight from those byte ranges.

Layer member names are only ever keys of the index, so no member can write outside anything. Names are
normalised (leading ``/`` and ``./`` dropped, ``.`` removed, ``..`` resolved and refused when it climbs out
of the root); a parent component that is a symlink in the image is followed *inside* the image (absolute
targets from the image root, ``..`` clamped at it), as umoci and docker do. ``/dev/*``, device nodes and
aufs metadata are dropped; a hardlink must name a file already in the image.
"""

from __future__ import annotations

import logging
import tarfile
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path

from ...errors import ConvertError
from ..model import RootfsEntry, When
from .layerfile import LayerTar
from .nodes import Inode, Meta, Node, joined, meta_of, normalise, parent_of
from .tarscan import DATA_TYPES, Member, scan

log = logging.getLogger("ckit.flatten")

MAX_SYMLINK_HOPS = 40


class Tree:
    """The merged view of the layers (pass 1); :func:`..squashfs.writer.write` is pass 2."""

    def __init__(self, default_mtime: int = 0) -> None:
        self.default_mtime = default_mtime
        self.nodes: dict[str, Node] = {"": Node("dir", -1, Meta(0o755, 0, 0, default_mtime))}
        self.children: dict[str, set[str]] = {"": set()}
        self.layers: list[LayerTar | None] = []  # None: a layer replayed from a record, not read
        # per layer, every data member's (offset, size) in tar order, deleted ones too: the writer groups small
        # files into fragment blocks by this list, so a deletion in an upper layer changes only its own group
        self.data: list[array[int]] = []
        self.dropped: dict[str, int] = {}

    def fork(self) -> Tree:
        """A copy to add one target's additions to; nodes are shared, so no method may change a node in place."""
        other = Tree.__new__(Tree)
        other.default_mtime, other.layers, other.data = self.default_mtime, list(self.layers), self.data
        other.nodes = dict(self.nodes)
        other.children = {path: set(names) for path, names in self.children.items()}
        other.dropped = dict(self.dropped)
        return other

    # --- index primitives -------------------------------------------------------------------------------------
    def _put(self, path: str, node: Node) -> None:
        self.nodes[path] = node
        self.children[parent_of(path)].add(path)
        if node.kind == "dir":
            self.children.setdefault(path, set())

    def _remove(self, path: str) -> None:
        """Remove ``path`` and everything below it (a loop, not recursion: trees may nest thousands deep)."""
        if path not in self.nodes:
            return
        siblings = self.children.get(parent_of(path))
        if siblings is not None:
            siblings.discard(path)
        pending = [path]
        while pending:
            current = pending.pop()
            node = self.nodes.pop(current, None)
            if node is not None and node.kind == "dir":
                pending.extend(self.children.pop(current, ()))

    def _implicit_dir(self, path: str, layer: int) -> None:
        self._remove(path)
        self._put(path, Node("dir", layer, Meta(0o755, 0, 0, self.default_mtime)))

    def _drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1

    def resolve_dir(self, parts: Iterable[str], layer: int, *, create: bool = True) -> str | None:
        """The directory ``parts`` names, following symlinks inside the image; missing dirs are created."""
        pending = list(parts)
        direct = self.nodes.get("/".join(pending))
        if direct is not None and direct.kind == "dir":
            return "/".join(pending)  # every node's ancestors are real directories: no symlink on the way
        cur, hops = "", 0
        while pending:
            comp = pending.pop(0)
            if comp in ("", "."):
                continue
            if comp == "..":
                cur = parent_of(cur)
                continue
            cand = joined(cur, comp)
            node = self.nodes.get(cand)
            if node is not None and node.kind == "symlink":
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise ConvertError(f"too many levels of symlinks at /{cand} in the image")
                if node.target.startswith("/"):
                    cur = ""
                pending[:0] = node.target.split("/")
                continue
            if node is None or node.kind != "dir":
                if not create:
                    return None
                self._implicit_dir(cand, layer)
            cur = cand
        return cur

    # --- pass 1 -------------------------------------------------------------------------------------------------
    def add_layer(self, layer: LayerTar, keep: list[Member] | None = None,
                  scanned: Iterable[Member] | None = None) -> None:
        """Index ``layer``'s headers; ``keep`` receives every member (for a record of the layer). ``scanned``:
        its members as :func:`.tarscan.scan` read them from it before (while it arrived, see :mod:`.headerscan`)."""
        if scanned is not None:
            self._add(layer, layer.what, self._checked(iter(scanned), layer, keep))
            return
        with open(layer.path, "rb", buffering=0) as raw:
            self._add(layer, layer.what, self._checked(scan(raw, layer.offset, layer.offset + layer.size, layer.what),
                                                       layer, keep))

    def replay_layer(self, members: Iterable[Member], what: str) -> None:
        """Index a layer from the members a record kept of it (offsets relative to the layer's start)."""
        self._add(None, what, members)

    def _checked(self, members: Iterator[Member], layer: LayerTar, keep: list[Member] | None) -> Iterator[Member]:
        for member in members:
            if member.isreg() and member.offset_data + member.size > layer.offset + layer.size:
                raise ConvertError(f"{layer.what}: {member.name} runs past the end of the layer")
            member.offset_data -= layer.offset
            if keep is not None:
                keep.append(member)
            yield member

    def _add(self, layer: LayerTar | None, what: str, members: Iterable[Member]) -> None:
        index = len(self.layers)
        self.layers.append(layer)
        data: array[int] = array("q")
        self.data.append(data)
        for member in members:
            if member.isreg() and member.size > 0:
                data.extend((member.offset_data, member.size))
            self._apply(member, index, what)

    def _apply(self, member: Member, layer: int, what: str) -> None:
        name = normalise(member.name, what)
        if not name:
            if member.isdir():
                self.nodes[""].meta = meta_of(member)
            return
        parent_name, _, base = name.rpartition("/")
        if name.startswith("dev/"):
            return self._drop("/dev/*")
        if base.startswith(".wh."):
            return self._whiteout_member(name, parent_name, base, layer, what)
        if member.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
            return self._drop("device nodes")
        if member.sparse:
            raise ConvertError(f"{what}: {name} is a sparse tar member, which ckit does not read",
                               hint="rebuild the image with a tool that writes plain tar layers")
        direct = self.nodes.get(parent_name)
        if direct is not None and direct.kind == "dir":
            folder = parent_name  # the common case: the parent is a real directory already
        else:
            found = self.resolve_dir(parent_name.split("/"), layer)
            assert found is not None
            folder = found
        return self._place(joined(folder, base), name, member, layer, what)

    def _whiteout_member(self, name: str, parent_name: str, base: str, layer: int, what: str) -> None:
        """``.wh.NAME`` hides NAME below; ``.wh..wh..opq`` hides everything the lower layers put in its folder."""
        if base == ".wh..wh..opq":
            folder = self.resolve_dir(parent_name.split("/"), layer)
            assert folder is not None
            self._opaque(folder, layer)
        elif base == ".wh.":
            raise ConvertError(f"{what}: whiteout {name!r} names no file",
                               hint="the layer is malformed or hostile; it was not converted")
        elif not base.startswith(".wh..wh."):
            self._whiteout(parent_name.split("/"), base[4:], layer)

    def _place(self, path: str, name: str, member: Member, layer: int, what: str) -> None:
        """The member ``name`` at ``path`` (its folder resolved), replacing what lower layers had there."""
        kind, existing = member.type, self.nodes.get(path)
        if kind in DATA_TYPES:
            if existing is not None:
                self._remove(path)
            self._put(path, Node("file", layer, inode=Inode(meta_of(member), member.size, layer, member.offset_data)))
        elif kind == tarfile.DIRTYPE:
            if existing is not None and existing.kind == "dir":
                existing.meta, existing.layer = meta_of(member), layer
                return
            self._remove(path)
            self._put(path, Node("dir", layer, meta_of(member)))
        elif kind == tarfile.LNKTYPE:
            self._hardlink(path, member, layer, what)
        elif kind == tarfile.SYMTYPE:
            if not member.linkname or "\0" in member.linkname:
                raise ConvertError(f"{what}: symlink /{name} has an empty target, which no file system can hold",
                                   hint="the layer is malformed or hostile; it was not converted")
            self._remove(path)
            self._put(path, Node("symlink", layer, meta_of(member), target=member.linkname))
        elif kind == tarfile.FIFOTYPE:
            self._remove(path)
            self._put(path, Node("fifo", layer, meta_of(member)))
        else:
            self._drop(f"tar type {kind!r}")

    def _hardlink(self, path: str, member: Member, layer: int, what: str) -> None:
        target_name = normalise(member.linkname, what)
        tparts = target_name.split("/")
        tparent = self.resolve_dir(tparts[:-1], layer, create=False) if target_name else None
        target = None if tparent is None else self.nodes.get(joined(tparent, tparts[-1]))
        if target is None or target.kind == "dir":
            raise ConvertError(f"{what}: hardlink /{member.name.lstrip('/')} points to /{target_name}, "
                               "which is not a file in the image",
                               hint="the layer is malformed or hostile; it was not converted")
        if target is self.nodes.get(path):
            return
        self._remove(path)
        self._put(path, Node(target.kind, layer, target.meta, target.inode, target.target))

    def _whiteout(self, parent_parts: list[str], name: str, layer: int) -> None:
        parent = self.resolve_dir(parent_parts, layer, create=False)
        path = None if parent is None else joined(parent, name)
        node = None if path is None else self.nodes.get(path)
        if path is not None and node is not None and node.layer < layer:
            self._remove(path)

    def _opaque(self, directory: str, layer: int) -> None:
        """Hide everything below ``directory`` that lower layers put there: a lower-layer entry goes unless it
        is a directory that still holds something from this layer. Post-order, with a stack (no recursion)."""
        order, pending = [], list(self.children.get(directory, ()))
        while pending:  # parents before children in ``order``; walked backwards, children come first
            path = pending.pop()
            order.append(path)
            if self.nodes[path].kind == "dir":
                pending.extend(self.children.get(path, ()))
        for path in reversed(order):
            node = self.nodes.get(path)
            if node is None or node.layer >= layer:
                continue
            if node.kind == "dir" and self.children.get(path):
                continue  # something of this layer (or a dir holding it) is still inside
            self._remove(path)

    # --- rootfs additions ---------------------------------------------------------------------------------------
    def add_entries(self, entries: Iterable[RootfsEntry], mtime: int) -> None:
        """Apply a converter's additions on top of the image, honouring each entry's ``When``."""
        layer = len(self.layers)
        for entry in entries:
            name = normalise(entry.path, "rootfs addition")
            if not name:
                continue
            parts = name.split("/")
            parent = self.resolve_dir(parts[:-1], layer)
            assert parent is not None
            path = joined(parent, parts[-1])
            existing = self.nodes.get(path)
            if existing is not None and entry.when is When.IF_ABSENT:
                continue
            if existing is not None and entry.when is When.UNLESS_REGULAR and existing.kind != "symlink":
                continue
            meta = Meta(entry.mode & 0o7777, entry.uid, entry.gid, mtime)
            if entry.kind == "dir":
                if existing is not None and existing.kind == "dir":
                    self.nodes[path] = Node("dir", existing.layer, meta)  # a new node: forks share nodes
                    continue
                node = Node("dir", layer, meta)
            elif entry.kind == "symlink":
                node = Node("symlink", layer, meta, target=entry.target)
            elif entry.kind == "file":
                node = Node("file", layer, inode=Inode(meta, len(entry.data), layer, data=entry.data))
            else:
                raise ConvertError(f"rootfs addition {entry.path}: unknown kind {entry.kind!r}")
            self._remove(path)
            self._put(path, node)

    # --- pass 2 -------------------------------------------------------------------------------------------------
    def inodes(self) -> list[Inode]:
        """Each regular file's data once (hardlinks share it), in layer order so every layer is read forward."""
        unique = dict.fromkeys(node.inode for node in self.nodes.values() if node.inode is not None)
        return sorted(unique, key=lambda inode: (inode.layer, inode.offset))

    def total_bytes(self) -> int:
        return sum(inode.size for inode in self.inodes())


def flatten(layers: Iterable[LayerTar], additions: Iterable[RootfsEntry] = (), *, mtime: int = 0) -> Tree:
    """Pass 1 over every layer, then the additions on top."""
    tree = Tree(default_mtime=mtime)
    for layer in layers:
        tree.add_layer(layer)
    tree.add_entries(additions, mtime)
    if tree.dropped:
        log.info("dropped: %s", ", ".join(f"{n} {why}" for why, n in sorted(tree.dropped.items())))
    return tree


def as_layer_tars(paths: Iterable[Path]) -> list[LayerTar]:
    """Plain tar files as layers (tests and tools)."""
    return [LayerTar(Path(p), 0, Path(p).stat().st_size, f"layer {n}") for n, p in enumerate(paths, 1)]
