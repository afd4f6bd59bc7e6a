"""The one SOURCE grammar (buildkit.oci.sources) and OCI layouts read from a tar (buildkit.oci.archive)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from buildkit.errors import ConfigError, IntegrityError
from buildkit.image import SOURCE_FORMS
from buildkit.image.sources.docker_archive import DockerArchiveSource
from buildkit.image.sources.named import parse_source, readers
from buildkit.image.sources.oci import OciLayoutSource
from buildkit.image.sources.oci_archive import OciArchiveSource
from buildkit.image.sources.registry import RegistrySource
from buildkit.oci.archive import OciArchive, RangeFile
from buildkit.oci.sources import FORMS, form_of, parse_spec
from buildkit.registry.push_plan import PUSHED_FORMS
from buildkit.registry.source import open_source


@pytest.mark.parametrize(("text", "form", "path", "ref"), [
    ("docker-daemon:localhost/app:1", "docker-daemon", None, "localhost/app:1"),
    ("docker-archive:x.tar", "docker-archive", "x.tar", None),
    ("docker-archive:x.tar:myapp:1", "docker-archive", "x.tar", "myapp:1"),
    ("oci:./layout:v2", "oci", "layout", "v2"),
    ("oci-archive:img.tar:latest", "oci-archive", "img.tar", "latest"),
    ("docker://registry.example.org/team/app:3", "docker", None, "registry.example.org/team/app:3"),
])
def test_every_form_is_parsed_by_the_one_grammar(text: str, form: str, path: str | None, ref: str | None) -> None:
    spec = parse_spec(text)
    assert (spec.form, spec.text, spec.ref) == (form, text, ref)
    assert spec.path == (Path(path) if path else None)


def test_a_path_that_exists_with_a_colon_is_taken_whole(tmp_path: Path) -> None:
    odd = tmp_path / "a:b.tar"
    odd.write_bytes(b"")
    assert parse_spec(f"docker-archive:{odd}").path == odd
    assert parse_spec(f"docker-archive:{odd}").ref is None


def test_bad_sources_are_bad_input_naming_the_forms() -> None:
    with pytest.raises(ConfigError, match="unknown image source 'podman:x'") as err:
        parse_spec("podman:x")
    assert "oci-archive:PATH[:TAG]" in str(err.value)
    with pytest.raises(ConfigError, match="names nothing"):
        parse_spec("docker-daemon:")
    with pytest.raises(ConfigError, match="the PATH before ':' is empty"):
        parse_spec("oci::tag")
    assert form_of("./app.sif") is None and form_of("demo") is None


def test_every_form_has_a_reader_and_a_pusher_by_name() -> None:
    assert set(readers()) == set(FORMS) - {"docker"}  # docker:// is read by the registry package's reader
    assert isinstance(open_source("docker://localhost:5000/app:1"), RegistrySource)
    with pytest.raises(ConfigError, match="this command reads no registry"):
        parse_source("docker://localhost:5000/app:1")  # the image layer has no registry client of its own
    assert set(PUSHED_FORMS) == set(FORMS) - {"docker"}  # a registry-to-registry copy is skopeo's job
    assert tuple(f.syntax for f in FORMS.values()) == SOURCE_FORMS
    assert "oci-archive:PATH[:TAG]" in SOURCE_FORMS


def test_convert_and_push_read_the_same_source(tmp_path: Path) -> None:
    source = parse_source("docker-archive:x.tar:myapp:1")
    assert isinstance(source, DockerArchiveSource) and (source.path, source.ref) == (Path("x.tar"), "myapp:1")
    archive = parse_source("oci-archive:img.tar:v1")
    assert isinstance(archive, OciArchiveSource) and isinstance(archive, OciLayoutSource)
    assert (archive.path, archive.tag, archive.agent) == (Path("img.tar"), "v1", "oci-archive")


# --- OCI layouts in a tar -------------------------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", **kind: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in kind.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if data else None)


def _layout_tar(path: Path, *, link_blob: bool = False) -> dict[str, str]:
    layer = b"layer bytes " * 100
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}).encode()

    def digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    manifest = json.dumps({"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                                          "digest": "sha256:" + digest(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                       "digest": "sha256:" + digest(layer), "size": len(layer)}]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + digest(manifest),
         "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": "v1"}}]}).encode()
    with tarfile.open(path, "w") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", index)
        for data in (config, manifest):
            _add(tar, f"./blobs/sha256/{digest(data)}", data)
        if link_blob:
            _add(tar, f"blobs/sha256/{digest(layer)}", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        else:
            _add(tar, f"blobs/sha256/{digest(layer)}", layer)
    return {"layer": "sha256:" + digest(layer), "manifest": "sha256:" + digest(manifest)}


def test_an_oci_archive_is_read_in_place(tmp_path: Path) -> None:
    path = tmp_path / "img.tar"
    digests = _layout_tar(path)
    archive = OciArchive(path, f"oci-archive:{path}")
    [entry] = archive.manifests()
    assert entry.ref_name == "v1" and entry.digest == digests["manifest"]
    assert json.loads(archive.read_blob(entry))["schemaVersion"] == 2
    where, offset, size = archive.blob_range(digests["layer"])
    assert where == path and offset % 512 == 0
    with RangeFile(path, offset, size) as blob:
        assert blob.read() == b"layer bytes " * 100
        assert blob.read() == b""  # never past the member
        blob.seek(6)
        assert blob.read(5) == b"bytes" and blob.tell() == 11
    layers = OciArchiveSource(f"oci-archive:{path}:v1", path, "v1").materialize(tmp_path).layers
    assert [(x.path, x.offset, x.size, x.digest) for x in layers] == [(path, offset, size, digests["layer"])]


def test_a_link_standing_for_a_blob_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.tar"
    digests = _layout_tar(path, link_blob=True)
    archive = OciArchive(path, "oci-archive:evil.tar")
    with pytest.raises(IntegrityError, match="is not a plain file in the archive") as err:
        archive.blob_range(digests["layer"])
    assert err.value.exit_code == 4
    with pytest.raises(IntegrityError, match="invalid digest"):
        archive.blob_range("sha256:../../etc/passwd")


def test_a_tar_without_a_layout_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "plain.tar"
    with tarfile.open(path, "w") as tar:
        _add(tar, "hello.txt", b"hi")
    with pytest.raises(ConfigError, match="holds no OCI image layout"):
        OciArchive(path, "oci-archive:plain.tar")
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ConfigError, match="is not a readable tar archive"):
        OciArchive(tmp_path / "junk.tar", "oci-archive:junk.tar")
