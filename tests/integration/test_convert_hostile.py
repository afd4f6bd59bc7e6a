"""Crafted hostile layers, fed to the real ``ckit`` command as an OCI layout and as a docker-archive.

Whatever the layers say, nothing is written outside the store and the output folder: names that climb out
of the root and hardlinks to files the image lacks fail with exit 1 and a clear message; absolute names,
symlinked parents pointing out of the image and device nodes are neutralised inside the image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

from tests.integration.hostile_images import SENTINEL, docker_archive, entry, oci_layout, tar_bytes


def ckit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], capture_output=True, text=True,  # noqa: S603
                          env=env, cwd=tmp_path / "cwd", check=False)


@pytest.fixture(params=["oci", "archive"])
def make_source(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "cwd").mkdir()

    def make(layers: list[list[tuple[tarfile.TarInfo, bytes]]]) -> str:
        tars = [tar_bytes(m) for m in layers]
        if request.param == "oci":
            return oci_layout(tmp_path / "layout", tars)
        return docker_archive(tmp_path / "image.tar", tars)

    return make


def written_outside(tmp_path: Path) -> list[Path]:
    """Every path named after the sentinel anywhere a hostile layer might aim at."""
    places = [Path("/tmp"), Path("/etc"), tmp_path, tmp_path.parent, Path("/")]
    return [p / SENTINEL for p in places if (p / SENTINEL).exists() or (p / SENTINEL).is_symlink()]


@pytest.mark.parametrize("layers, message", [
    ([[entry(f"../../{SENTINEL}", data=b"x")]], "climbs out of the image root"),
    ([[entry(f"a/../../{SENTINEL}", data=b"x")]], "climbs out of the image root"),
    ([[entry("link", "link", target=f"../../../{SENTINEL}")]], "climbs out of the image root"),
    ([[entry("shadow", "link", target="/etc/shadow")]], "which is not a file in the image"),
])
def test_escaping_layers_fail_cleanly(make_source, tmp_path: Path, layers, message: str) -> None:
    source = make_source(layers)
    out = tmp_path / "out.sqsh"
    done = ckit(tmp_path, "convert", source, "--to", "sqsh", "-o", str(out))
    assert done.returncode == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
    assert not list((tmp_path / "cache" / "artifacts").glob("*"))
    assert written_outside(tmp_path) == []


def test_absolute_names_symlinks_out_and_devices_are_neutralised(make_source, tmp_path: Path) -> None:
    layers = [
        [entry("bin", "dir"), entry(f"/{SENTINEL}-abs", data=b"abs"), entry("out", "symlink", target=f"/tmp/{SENTINEL}"),
         entry("up", "symlink", target=f"../../../../{SENTINEL}"), entry("dev/sda", "blk"), entry("console", "chr")],
        [entry("out/pwned", data=b"through a symlink"), entry("up/pwned2", data=b"through ..")],
    ]
    source = make_source(layers)
    out = tmp_path / "out.sqsh"
    done = ckit(tmp_path, "convert", source, "--to", "sqsh", "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["path"] == str(out)
    listing = subprocess.run(["unsquashfs", "-lln", str(out)], capture_output=True, text=True,  # noqa: S607
                             check=True).stdout
    names = {line.split()[-1] if "->" not in line else line.split()[-3] for line in listing.splitlines()}
    assert f"squashfs-root/{SENTINEL}-abs" in names
    assert f"squashfs-root/tmp/{SENTINEL}/pwned" in names  # followed inside the image
    assert f"squashfs-root/{SENTINEL}/pwned2" in names  # ".." clamped at the image root
    assert not any(n.startswith(("squashfs-root/dev/", "squashfs-root/console")) for n in names)
    assert written_outside(tmp_path) == []
    assert not Path(f"/{SENTINEL}-abs").exists()


def test_tampered_registry_blob_is_an_integrity_error(registry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "cwd").mkdir()
    layer = tar_bytes([entry("bin", "dir"), entry("payload", data=os.urandom(4096))])
    source = oci_layout(tmp_path / "layout", [layer])
    ref = f"{registry.host}/ckit/tampered:{uuid.uuid4().hex[:8]}"
    subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", source, f"docker://{ref}"],  # noqa: S607
                   check=True, capture_output=True)
    layout = tmp_path / "layout"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_text())
    digest = manifest["layers"][0]["digest"][7:]
    blob = next(registry.data_dir.rglob(f"blobs/sha256/{digest[:2]}/{digest}/data"))
    data = bytearray(blob.read_bytes())
    data[-10] ^= 0xFF  # same size, different bytes
    blob.write_bytes(bytes(data))
    out = tmp_path / "out.sif"
    done = ckit(tmp_path, "convert", f"docker://{ref}", "--to", "sif", "-o", str(out))
    assert done.returncode == 4, done.stderr
    assert "does not match its digest" in done.stderr
    assert not out.exists()


def test_bad_source_is_a_usage_error_and_convert_needs_no_tools(tmp_path: Path) -> None:
    (tmp_path / "cwd").mkdir()
    done = ckit(tmp_path, "convert", "podman:whatever", "--to", "sif")
    assert done.returncode == 2
    assert "unknown image source 'podman:whatever'" in done.stderr
    assert ("docker-daemon:REF, docker-archive:PATH[:REF], oci:PATH[:TAG], oci-archive:PATH[:TAG], docker://REF"
            in done.stderr)
    source = docker_archive(tmp_path / "image.tar", [tar_bytes([entry("bin", "dir")])])
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache"), "PATH": str(tmp_path / "empty")}
    for target in ("sqsh", "sif"):  # no squashfs tool, no apptainer, nothing on PATH
        done = subprocess.run([sys.executable, "-m", "buildkit.cli", "convert", source, "--to", target,  # noqa: S603
                               "-o", str(tmp_path / f"out.{target}")],
                              capture_output=True, text=True, env=env, cwd=tmp_path / "cwd", check=False)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"out.{target}").stat().st_size > 0
