"""Tampered and out-of-bounds input: every blob verified before its content counts, nothing read from outside.

An uncompressed layer, a sha512 layout, a docker-archive layer against its diff_id, a store entry changed in
place at the same size; a layer blob that is a symlink to a host file, a symlinked blob folder, a digest that
is a path. Each is refused with exit 4 (or made again, for the store) and leaves no output behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.hostile_images import (
    SENTINEL,
    docker_archive,
    entry,
    layer_blob,
    layout_manifest,
    oci_layout,
    tar_bytes,
)
from tests.integration.hostile_registry import HostileServer, Reply, Seen

LAYER = tar_bytes([entry("bin", "dir"), entry("bin/payload", data=b"genuine " * 512)])


def ckit(tmp_path: Path, *args: str, cache: str = "cache") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / cache)}
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], capture_output=True, text=True,  # noqa: S603
                          env=env, cwd=tmp_path, check=False, timeout=300)


def flip(path: Path, at: int = -600) -> None:
    """Change one byte in place: same size, different content."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def refused(done: subprocess.CompletedProcess[str], out: Path, message: str) -> None:
    assert done.returncode == 4, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.parametrize("compress", [False, True])
def test_a_layer_that_does_not_match_its_digest_is_refused(tmp_path: Path, compress: bool) -> None:
    source = oci_layout(tmp_path / "layout", [LAYER], compress=compress)
    flip(layer_blob(tmp_path / "layout"), at=-1500 if not compress else 30)
    out = tmp_path / "out.sqsh"
    done = ckit(tmp_path, "convert", source, "--to", "sqsh", "-o", str(out))
    if compress and done.returncode == 1:  # a flipped byte inside deflate data may break the stream first
        assert "corrupt gzip data" in done.stderr and not out.exists()
        return
    refused(done, out, "does not match its digest")
    assert not list((tmp_path / "cache" / "artifacts").glob("*.sqsh"))


def test_sha512_layouts_are_verified_too(tmp_path: Path) -> None:
    source = oci_layout(tmp_path / "layout", [LAYER], compress=False, algorithm="sha512")
    good = ckit(tmp_path, "convert", source, "--to", "sqsh", "-o", str(tmp_path / "good.sqsh"), cache="first")
    assert good.returncode == 0, good.stderr
    flip(layer_blob(tmp_path / "layout"), at=-1500)
    out = tmp_path / "out.sqsh"
    refused(ckit(tmp_path, "convert", source, "--to", "sqsh", "-o", str(out)), out, "got sha512:")
    _, manifest_path = layout_manifest(tmp_path / "layout")
    config = json.loads(manifest_path.read_text())["config"]["digest"].partition(":")[2]
    flip(tmp_path / "layout" / "blobs" / "sha512" / config, at=5)
    refused(ckit(tmp_path, "convert", source, "--to", "sqsh", "-o", str(out)), out, "does not match its digest")


def test_a_docker_archive_layer_is_checked_against_its_diff_id(tmp_path: Path) -> None:
    archive = tmp_path / "image.tar"
    source = docker_archive(archive, [LAYER])
    data = archive.read_bytes()
    at = data.index(b"genuine genuine")
    archive.write_bytes(data[:at] + b"tampered" + data[at + 8:])
    out = tmp_path / "out.sif"
    refused(ckit(tmp_path, "convert", source, "--to", "sif", "-o", str(out)), out, "does not match its diff_id")


def test_a_store_entry_changed_in_place_is_made_again_not_served(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # else the superblock holds each conversion's time
    source = oci_layout(tmp_path / "layout", [LAYER])
    first = ckit(tmp_path, "convert", source, "--to", "sqsh", "--json", "-o", str(tmp_path / "out.sqsh"))  # a link of the store's
    assert first.returncode == 0, first.stderr
    stored = Path(json.loads(first.stdout)["path"])
    original = stored.read_bytes()
    flip(stored, at=len(original) // 2)  # the same size, other bytes
    again = ckit(tmp_path, "convert", source, "--to", "sqsh", "--json", "-o", str(tmp_path / "out.sqsh"))
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["cache_hit"] is False and result["reused_bytes"] == 0  # nothing copied from the changed file
    assert Path(result["path"]).read_bytes() == original


def test_a_layer_blob_that_is_a_symlink_to_a_host_file_is_refused(tmp_path: Path) -> None:
    host_tar = tmp_path / f"{SENTINEL}.tar"
    host_tar.write_bytes(tar_bytes([entry(SENTINEL, data=b"host secret")]))
    source = oci_layout(tmp_path / "layout", [host_tar.read_bytes()], compress=False)
    blob = layer_blob(tmp_path / "layout")
    blob.unlink()
    blob.symlink_to(host_tar)  # same digest, but the bytes live outside the layout
    out = tmp_path / "out.sqsh"
    refused(ckit(tmp_path, "convert", source, "--to", "sqsh", "-o", str(out)), out, "is not a regular file")


def test_a_symlinked_blob_folder_is_refused(tmp_path: Path) -> None:
    source = oci_layout(tmp_path / "layout", [LAYER])
    blobs = tmp_path / "layout" / "blobs"
    (tmp_path / "elsewhere").mkdir()
    (blobs / "sha256").rename(tmp_path / "elsewhere" / "sha256")
    (blobs / "sha256").symlink_to(tmp_path / "elsewhere" / "sha256")
    out = tmp_path / "out.sqsh"
    refused(ckit(tmp_path, "convert", source, "--to", "sqsh", "-o", str(out)), out, "is not a directory of the layout")


class Accepting:
    """A registry that accepts every upload and records what it was sent."""

    def __init__(self) -> None:
        self.server = HostileServer(self.handle)

    def handle(self, request: Seen) -> Reply:
        if request.method == "HEAD":
            return 404, {}, b""
        if request.method == "POST":
            return 202, {"Location": "/v2/upload/1"}, b""
        if "/manifests/" in request.path:
            return 201, {"Docker-Content-Digest": "sha256:" + "0" * 64}, b""
        return (201 if request.method == "PUT" else 200), {}, b"{}"


@pytest.mark.parametrize("how", ["path-digest", "symlink"])
def test_push_of_a_layout_never_uploads_a_host_file(tmp_path: Path, how: str) -> None:
    secret = tmp_path / "host-secret"
    secret.write_bytes(f"{SENTINEL} host secret".encode())
    source = oci_layout(tmp_path / "layout", [LAYER], compress=False)
    manifest, manifest_path = layout_manifest(tmp_path / "layout")
    if how == "path-digest":  # the manifest names a "digest" that is a path to the host file
        rel = os.path.relpath(secret, tmp_path / "layout" / "blobs" / "sha256")
        manifest["layers"][0]["digest"] = f"sha256:{rel}"
        manifest_path.write_text(json.dumps(manifest))  # (the manifest blob no longer matches its digest…)
        index = json.loads((tmp_path / "layout" / "index.json").read_text())
        import hashlib  # …so re-register it under its new digest, as an attacker would

        data = manifest_path.read_bytes()
        new = hashlib.sha256(data).hexdigest()
        (manifest_path.parent / new).write_bytes(data)
        index["manifests"][0].update(digest=f"sha256:{new}", size=len(data))
        (tmp_path / "layout" / "index.json").write_text(json.dumps(index))
        message = "invalid digest"
    else:
        blob = layer_blob(tmp_path / "layout")
        blob.unlink()
        blob.symlink_to(secret)
        message = "is not a regular file"
    registry = Accepting()
    with registry.server:
        done = ckit(tmp_path, "push", source, f"{registry.server.host}/team/app:1")
    assert done.returncode == 4, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not any(SENTINEL.encode() in r.body for r in registry.server.seen)
