from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from buildkit import __version__
from buildkit.errors import ConfigError, IntegrityError, RegistryError
from buildkit.oci.digest import VerifyingReader
from buildkit.orchestration.stage import copy_verified, expand_dir, stage_dir
from buildkit.registry.distribution.client import ManifestHead
from buildkit.registry.distribution.reference import parse
from buildkit.registry.distribution.streams import LimitedReader
from buildkit.registry.lock import lock_data, render
from buildkit.registry.transfer import annotations as notes
from buildkit.registry.transfer.artifacts import (
    SIF,
    SQSH,
    build_manifest,
    detect_kind,
    kind_of_manifest,
    output_name,
)
from buildkit.site.compat import SIF_LAYER_PROTO, SIF_LAYER_V1

DATA = b"ckit blob " * 1000
DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()


def test_verifying_reader_accepts_the_right_bytes_in_pieces() -> None:
    reader = VerifyingReader(io.BytesIO(DATA), DIGEST, len(DATA), "blob x")
    got = b"".join(iter(lambda: reader.read(333), b""))
    assert got == DATA and reader.verified


@pytest.mark.parametrize(("data", "size", "message"), [
    (DATA[:-1] + b"!", len(DATA), "blob x does not match its digest (got sha256:"),
    (DATA + b"more", len(DATA), "blob x is larger than the 10000 bytes its descriptor says"),
    (DATA[:-10], len(DATA), "does not match its digest"),
])
def test_verifying_reader_raises_integrity_error(data: bytes, size: int, message: str) -> None:
    reader = VerifyingReader(io.BytesIO(data), DIGEST, size, "blob x")
    with pytest.raises(IntegrityError) as err:
        while reader.read(4096):
            pass
    assert message in str(err.value)
    assert err.value.exit_code == 4


def test_limited_reader_reports_progress_and_stops_at_size() -> None:
    seen: list[int] = []
    reader = LimitedReader(io.BytesIO(DATA), 25, seen.append)
    assert len(reader) == 25
    assert reader.read(10) + reader.read(100) + reader.read(5) == DATA[:25]
    assert seen == [25]  # small requests are served a whole block (up to READ_SIZE) at a time


def test_limited_reader_serves_large_blocks_to_small_requests() -> None:
    from buildkit.registry.distribution.streams import READ_SIZE

    payload = bytes(range(256)) * (3 * READ_SIZE // 256 + 7)
    reader = LimitedReader(io.BytesIO(payload), len(payload))
    blocks = []
    while block := reader.read(16384):  # what http.client asks for
        blocks.append(block)
    assert b"".join(blocks) == payload
    assert [len(b) for b in blocks] == [READ_SIZE, READ_SIZE, READ_SIZE, len(payload) - 3 * READ_SIZE]


def test_detect_kind(tmp_path: Path) -> None:
    sif = tmp_path / "a.sif"
    sif.write_bytes(bytes(32) + b"SIF_MAGIC\x0001\x00" + bytes(100))
    sqsh = tmp_path / "a.sqsh"
    sqsh.write_bytes(b"hsqs" + bytes(100))
    other = tmp_path / "a.txt"
    other.write_text("hello")
    assert detect_kind(sif) is SIF and detect_kind(sqsh) is SQSH
    with pytest.raises(ConfigError, match="neither a SIF image nor a squashfs"):
        detect_kind(other)


def test_artifact_manifest_is_canonical(golden) -> None:
    manifest = build_manifest(SIF, "sha256:" + "1" * 64, 1234, "app.sif",
                              {"io.ckit.stack": "demo", "org.opencontainers.image.created": "2023-11-14T22:13:20Z"})
    golden("registry/sif-manifest.json", json.dumps(json.loads(manifest), indent=2) + "\n")
    assert manifest == json.dumps(json.loads(manifest), sort_keys=True, separators=(",", ":")).encode()
    assert kind_of_manifest(json.loads(manifest)) is SIF
    assert kind_of_manifest({"config": {"mediaType": "application/vnd.oci.image.config.v1+json"}}) is None


def test_a_sif_goes_up_with_the_layer_type_every_singularity_pulls_unless_told() -> None:
    """SingularityCE < 3.7 finds only the first SIF layer type; 3.7+ and Apptainer take both."""
    def layer_type(manifest: bytes) -> str:
        return json.loads(manifest)["layers"][0]["mediaType"]

    assert layer_type(build_manifest(SIF, "sha256:" + "1" * 64, 1, "a.sif", {})) == SIF_LAYER_PROTO
    assert layer_type(build_manifest(SIF, "sha256:" + "1" * 64, 1, "a.sif", {}, SIF_LAYER_V1)) == SIF_LAYER_V1
    with pytest.raises(RegistryError, match="is not a layer type of a .sqsh artifact"):
        build_manifest(SQSH, "sha256:" + "1" * 64, 1, "a.sqsh", {}, SIF_LAYER_V1)


def test_output_name_uses_a_safe_title_only() -> None:
    ref = parse("r.io/team/app:v2")
    assert output_name(ref, SIF, "app.sif") == "app.sif"
    assert output_name(ref, SIF, "../../etc/passwd") == "app_v2.sif"
    assert output_name(ref, SQSH, None) == "app_v2.sqsh"
    assert output_name(ref, SQSH, "..") == "app_v2.sqsh"


def test_annotations_honour_source_date_epoch_and_options(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    sqsh = tmp_path / "x.sqsh"
    sqsh.write_bytes(b"hsqs")
    values = notes.for_artifact(sqsh, "sqsh", stack="demo", parameters={"b": {"x": "1"}, "a": {}},
                                source_digest="sha256:" + "f" * 64, extra={"org.example": "1"})
    assert values == {
        "io.ckit.parameters": '{"a":{},"b":{"x":"1"}}',
        "io.ckit.source.digest": "sha256:" + "f" * 64,
        "io.ckit.stack": "demo",
        "io.ckit.version": __version__,
        "org.example": "1",
        "org.opencontainers.image.created": "2023-11-14T22:13:20Z",
    }
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "soon")
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH='soon' is not a number"):
        notes.for_artifact(sqsh, "sqsh")
    assert notes.parse_pairs(["a=b=c"]) == {"a": "b=c"}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        notes.parse_pairs(["novalue"])


def test_annotations_come_from_the_labels_inside_a_sif(tmp_path: Path, monkeypatch) -> None:
    """The SIF's oci-config.json as the converter writes it (the bare config object, ``{"Labels": …}``)."""
    from buildkit.image.model import ImageConfig
    from buildkit.image.rootfs.apptainer import oci_config_json
    from buildkit.image.sif.write import write_apptainer_sif

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    squashfs = tmp_path / "fs.sqsh"
    squashfs.write_bytes(b"hsqs" + bytes(4092))
    image = {"architecture": "amd64", "config": {"Cmd": ["/bin/sh"], "Labels": {
        "io.ckit.stack": "from-sif", "io.ckit.parameters": '{"t":{"v":"1"}}', "maintainer": "someone"}}}
    written = oci_config_json(ImageConfig.from_image_config(image))
    assert json.loads(written)["Labels"]["io.ckit.stack"] == "from-sif"  # no "config" key around it
    sif = tmp_path / "labelled.sif"
    write_apptainer_sif(sif, deffile=b"bootstrap: docker\n", oci_config=written, squashfs=squashfs, arch="amd64",
                        source_date_epoch=1700000000)
    values = notes.for_artifact(sif, "sif", source_digest="sha256:" + "e" * 64)
    assert values["io.ckit.stack"] == "from-sif"
    assert values["io.ckit.parameters"] == '{"t":{"v":"1"}}'
    assert "maintainer" not in values
    assert values["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"
    assert notes.for_artifact(sif, "sif", stack="override")["io.ckit.stack"] == "override"

    whole = tmp_path / "whole.sif"  # a whole image config in that object is read as well
    write_apptainer_sif(whole, deffile=b"bootstrap: docker\n", oci_config=json.dumps(image).encode(),
                        squashfs=squashfs, arch="amd64")
    assert notes.for_artifact(whole, "sif")["io.ckit.stack"] == "from-sif"


def test_lock_file_is_deterministic(golden) -> None:
    head = ManifestHead("sha256:" + "d" * 64, "application/vnd.oci.image.index.v1+json", 1000)
    data = lock_data(stack="pytorch", parameters={"torch": {"version": "2.3"}, "base": {}}, fingerprint="f" * 16,
                     base_image="nvcr.io/nvidia/pytorch:24.06-py3",
                     base_ref=parse("nvcr.io/nvidia/pytorch:24.06-py3"), head=head,
                     sets=["torch.version=2.3", "a.b=c"], ngc="24.06")
    text = render(data)
    golden("registry/ckit.lock", text)
    assert render(json.loads(text)) == text


def test_stage_folders(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("USER", "alice")
    monkeypatch.delenv("CKIT_UNSET_VAR", raising=False)
    assert expand_dir("/scratch/$USER/images") == Path("/scratch/alice/images")
    with pytest.raises(ConfigError, match="unset variable"):
        expand_dir("/scratch/$CKIT_UNSET_VAR")
    assert stage_dir("/a", tmp_path, "s") == tmp_path
    with pytest.raises(ConfigError, match="site 's' has no shared_image_dir"):
        stage_dir(None, None, "s")


def test_copy_verified_puts_the_file_in_place(tmp_path: Path) -> None:
    src = tmp_path / "a.sqsh"
    src.write_bytes(b"hsqs" + DATA)
    staged = copy_verified(src, tmp_path / "dest")
    assert staged.path.read_bytes() == src.read_bytes()
    assert staged.digest == "sha256:" + hashlib.sha256(src.read_bytes()).hexdigest()
    with pytest.raises(IntegrityError):
        copy_verified(src, tmp_path / "dest2", expected_digest="sha256:" + "0" * 64)
    assert list((tmp_path / "dest2").iterdir()) == []
