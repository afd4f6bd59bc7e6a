"""Property tests over ckit's parsers of untrusted input, run in a child process whose memory and time are measured.

Each property feeds generated or mutated input to one parser (the tar header scan and the merge of layers, gzip
layers, OCI layouts, image configs and the scripts made from them, SIF headers, YAML recipes, docker archive
manifests, token and error answers) and asserts that it either returns or raises a :class:`CkitError` (a clear
message and exit code): no other exception, no hang (each example has a deadline). ``python -m
tests.integration.hostile_properties`` runs them all; ``test_property_parsers.py`` runs that under a memory ceiling.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildkit.errors import CkitError

EXAMPLES = int(os.environ.get("CKIT_PROPERTY_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=5000, database=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=5), max_leaves=30)
KEYS = st.sampled_from(["config", "Config", "Entrypoint", "Cmd", "Env", "Labels", "Volumes", "WorkingDir", "User",
                        "architecture", "rootfs", "diff_ids", "manifests", "layers", "digest", "size", "mediaType",
                        "platform", "annotations", "schemaVersion", "Layers", "RepoTags", "token", "errors"])
SHAPED = st.recursive(JSON, lambda inner: st.dictionaries(KEYS, inner, max_size=6) | st.lists(inner, max_size=4),
                      max_leaves=40)


def only_clear_errors(check: Callable[[], Any]) -> None:
    with contextlib.suppress(CkitError):  # anything else fails the property
        check()


# --- tar layers ---------------------------------------------------------------------------------------------------
def _seed_tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **attrs: Any) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.size, info.mode = kind, len(data), 0o755
            for key, value in attrs.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        add("etc", tarfile.DIRTYPE)
        add("etc/passwd", data=b"root:x:0:0::/root:/bin/sh\n")
        add("bin", tarfile.DIRTYPE)
        add("bin/sh", data=b"\x7fELF" + bytes(600))
        add("bin/link", tarfile.SYMTYPE, linkname="sh")
        add("bin/hard", tarfile.LNKTYPE, linkname="bin/sh")
        add("deep/" * 30 + "long-name", data=b"x", pax_headers={"SCHILY.xattr.user.a": "b"})
        add("etc/.wh.gone")
        add("opt/.wh..wh..opq")
    return out.getvalue()


SEED_TAR = _seed_tar()
MUTATIONS = st.lists(st.tuples(st.integers(0, len(SEED_TAR) - 1), st.binary(min_size=1, max_size=12)), max_size=8)


def _mutated(edits: list[tuple[int, bytes]], cut: int | None) -> bytes:
    data = bytearray(SEED_TAR)
    for at, patch in edits:
        data[at:at + len(patch)] = patch
    return bytes(data[:cut] if cut is not None else data)


def _flatten(layers: list[bytes]) -> None:
    from buildkit.image.layers.flatten import as_layer_tars, flatten

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for n, data in enumerate(layers):
            path = Path(tmp) / f"l{n}.tar"
            path.write_bytes(data)
            paths.append(path)
        flatten(as_layer_tars(paths)).inodes()


@SETTINGS
@given(MUTATIONS, st.one_of(st.none(), st.integers(0, len(SEED_TAR))), st.booleans())
def tar_layers(edits: list[tuple[int, bytes]], cut: int | None, twice: bool) -> None:
    layer = _mutated(edits, cut)
    only_clear_errors(lambda: _flatten([SEED_TAR, layer] if twice else [layer]))


@SETTINGS
@given(st.binary(max_size=4096))
def tar_noise(data: bytes) -> None:
    only_clear_errors(lambda: _flatten([data]))


@SETTINGS
@given(MUTATIONS, st.integers(0, 400))
def gzip_layers(edits: list[tuple[int, bytes]], cut: int) -> None:
    from buildkit.image.layers.layerfile import prepare
    from buildkit.image.sources.base import LayerBlob

    packed = bytearray(zlib.compress(_mutated(edits, None), wbits=31))
    packed = packed[:max(2, len(packed) - cut)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "blob"
        path.write_bytes(bytes(packed))
        only_clear_errors(lambda: prepare(LayerBlob(path, 0, len(packed), "layer"), Path(tmp), 1))


# --- OCI layouts and image configs -------------------------------------------------------------------------------
def _layout(tmp: Path, index: Any, manifest: Any, config: Any) -> str:
    import hashlib

    blobs = tmp / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(value: Any) -> dict[str, Any]:
        data = json.dumps(value).encode() if not isinstance(value, bytes) else value
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blobs / digest[7:]).write_bytes(data)
        return {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": len(data)}

    config_desc = put(config)
    if isinstance(manifest, dict):
        manifest.setdefault("config", config_desc)
    entry = put(manifest)
    if isinstance(index, dict) and not index.get("manifests"):
        index["manifests"] = [entry]
    (tmp / "index.json").write_text(json.dumps(index))
    (tmp / "oci-layout").write_text("{}")
    return f"oci:{tmp}"


@SETTINGS
@given(SHAPED, SHAPED, SHAPED)
def oci_layouts(index: Any, manifest: Any, config: Any) -> None:
    from buildkit.image.sources.named import parse_source

    with tempfile.TemporaryDirectory() as tmp:
        def read() -> None:
            source = parse_source(_layout(Path(tmp), index, manifest, config))
            source.identify()
            source.materialize(Path(tmp))
        only_clear_errors(read)


@SETTINGS
@given(SHAPED)
def image_configs(blob: Any) -> None:
    from buildkit.image.model import ImageConfig
    from buildkit.image.rootfs import apptainer as apptainer_rootfs
    from buildkit.image.rootfs import charliecloud as charliecloud_rootfs
    from buildkit.image.rootfs import enroot as enroot_rootfs

    def build() -> None:
        config = ImageConfig.from_image_config(blob)
        enroot_rootfs.entries(config, provenance="oci:x")
        charliecloud_rootfs.entries(config)
        apptainer_rootfs.entries(config, deffile="bootstrap: oci\nfrom: x\n", source_date_epoch=0)
        apptainer_rootfs.oci_config_json(config)
    only_clear_errors(build)


@SETTINGS
@given(st.one_of(SHAPED.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200)))
def small_documents(data: bytes) -> None:
    from buildkit.oci.docker_manifest import archive_images
    from buildkit.registry.distribution.client import error_details
    from buildkit.registry.distribution.tokens import _token_fields

    only_clear_errors(lambda: archive_images(data, "docker-archive:x"))
    only_clear_errors(lambda: _token_fields(data, "token server"))
    assert all(isinstance(line, str) for line in error_details(data))


# --- SIF headers ----------------------------------------------------------------------------------------------------
def _seed_sif() -> bytes:
    from buildkit.image.sif import write as S

    out = io.BytesIO()
    S.write_sif(out, objects=[S.SifObject(S.DATA_DEFFILE, data=b"bootstrap: docker\n"),
                              S.SifObject(S.DATA_GENERIC_JSON, data=b"{}", name="oci-config.json"),
                              S.SifObject(S.DATA_PARTITION, data=b"hsqs" + bytes(200), arch="amd64")],
                created=0, uuid=bytes(16))
    return out.getvalue()


SEED_SIF = _seed_sif()
SIF_EDITS = st.lists(st.tuples(st.integers(0, 4096 + 3 * 585), st.binary(min_size=1, max_size=8)), max_size=8)


@SETTINGS
@given(SIF_EDITS, st.lists(st.tuples(st.integers(0, 2), st.integers(5, 9), st.integers(-2**63, 2**63 - 1)),
                           max_size=4))
def sif_headers(edits: list[tuple[int, bytes]], fields: list[tuple[int, int, int]]) -> None:
    from buildkit.image.sif import text as T
    from buildkit.image.sif import write as S

    data = bytearray(SEED_SIF)
    for at, patch in edits:
        data[at:at + len(patch)] = patch
    for index, field, value in fields:  # offset, size, padded size, created, modified of a descriptor
        at = S.DESCRIPTORS_OFFSET + index * S.DESCRIPTOR_SIZE + 17 + (field - 5) * 8
        data[at:at + 8] = struct.pack("<q", value)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.sif"
        path.write_bytes(bytes(data))

        def read() -> None:
            sif = S.read_sif(path)
            T.format_header(sif) + T.format_list(sif)
            for desc in sif.descriptors:
                T.format_info(desc), T.descriptor_json(desc), sif.read_object(desc, limit=1 << 20)
            T.header_json(sif)
        only_clear_errors(read)


# --- recipes --------------------------------------------------------------------------------------------------------
YAML_TEXT = st.lists(st.sampled_from(["a: 1\n", "- x\n", "b: &x [1, 2]\n", "c: *x\n", "  d: e\n", "{", "[", "]",
                                      "}", ": ", "? ", "!!python/object:os.system\n", "\t", "'", '"', "\n",
                                      "kind: stack\n", "base: debian\n", "<<: *x\n", "%YAML 1.1\n", "---\n"]),
                     max_size=30).map("".join)


@SETTINGS
@given(st.one_of(YAML_TEXT, st.text(max_size=200), SHAPED.map(yaml.safe_dump)))
def yaml_documents(text: str) -> None:
    from buildkit.config.yamlfile import parse

    only_clear_errors(lambda: parse(text, Path("x.yaml")))


@SETTINGS
@given(SHAPED, st.sampled_from(["stack", "addon"]))
def recipes(body: Any, kind: str) -> None:
    from buildkit.recipe.catalog import Catalog

    doc = {"kind": kind, "description": "generated", **(body if isinstance(body, dict) else {"x": body})}
    if kind == "stack":
        doc.setdefault("base", "debian")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / ("stacks" if kind == "stack" else "addons")
        folder.mkdir()
        (folder / "mine.yaml").write_text(yaml.safe_dump(doc))
        if kind == "addon":
            (Path(tmp) / "stacks").mkdir()
            (Path(tmp) / "stacks" / "mine.yaml").write_text("kind: stack\ndescription: s\nbase: debian\n"
                                                             "addons: [mine]\n")
        only_clear_errors(lambda: Catalog.from_dirs([Path(tmp)]).resolve("mine"))


PROPERTIES = [tar_layers, tar_noise, gzip_layers, oci_layouts, image_configs, small_documents, sif_headers,
              yaml_documents, recipes]


def main() -> int:
    for prop in PROPERTIES:
        prop()
        print(f"{prop.__name__}: {EXAMPLES} examples, only clear errors", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
