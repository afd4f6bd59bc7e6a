"""Hostile layers and image configs written byte by byte, converted by the real CLI: never a loop, a crash or a
broken artifact.

Each malformed layer ends in one clear error (exit 1, 2 or 4) within seconds and a bounded amount of memory; each
unusual but legal one (a tree nested 1,200 deep under a whiteout, an ENV name with a newline) gives an image that
squashfs-tools' ``unsquashfs`` (what ``enroot create`` runs) reads and whose scripts ``dash`` runs.
"""

from __future__ import annotations

import json
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.integration.adversary import MEMORY_CEILING, clean_failure, run
from tests.integration.hostile_images import (
    END,
    base256,
    config_blob,
    docker_archive,
    header,
    member,
    oci_layout,
    pax,
    sha,
)

GOOD = member("bin/", kind=b"5", mode=0o755) + member("bin/tool", b"#!/bin/sh\necho ok\n", mode=0o755)


def convert(tmp_path: Path, layers: list[bytes], target: str = "sqsh", *, config: bytes | None = None,
            compress: bool = False, timeout: float = 60):  # type: ignore[no-untyped-def]
    layout = tmp_path / "layout"
    source = oci_layout(layout, layers, compress=compress)
    if config is not None:
        replace_config(layout, config)
    out = tmp_path / f"out.{target}"
    ran = run("convert", source, "--to", target, "-o", str(out), env={"CKIT_CACHE_DIR": str(tmp_path / "cache")},
              timeout=timeout)
    return ran, out


def replace_config(layout: Path, config: bytes) -> None:
    """Swap the layout's image config for ``config`` (digests fixed up, so only the content is hostile)."""
    index = json.loads((layout / "index.json").read_text())
    manifest_path = layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(manifest_path.read_text())
    (layout / "blobs" / "sha256" / sha(config).split(":")[1]).write_bytes(config)
    manifest["config"] = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(config),
                          "size": len(config)}
    data = json.dumps(manifest).encode()
    (layout / "blobs" / "sha256" / sha(data).split(":")[1]).write_bytes(data)
    index["manifests"][0].update(digest=sha(data), size=len(data))
    (layout / "index.json").write_text(json.dumps(index))


def unsquashfs_lists(path: Path, offset: int = 0) -> str:
    done = subprocess.run(["unsquashfs", "-o", str(offset), "-lls", str(path)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- the header scan: every loop ends, every field is checked ----------------------------------------------------
@pytest.mark.parametrize("layer, says", [
    (header("neg", size_field=base256(-1536, 12)) + END, "negative size"),  # GNU base-256: looped for ever
    (pax({"size": "-1536"}) + member("neg") + END, "PAX size='-1536'"),
    (pax({"mtime": "nan"}) + member("nan") + END, "PAX mtime='nan'"),
    (pax({"uid": "x1"}) + member("uid") + END, "PAX uid='x1'"),
    (pax(b"99999 path=x\n") + member("x") + END, "malformed PAX header"),
    (pax(b"junk") + member("x") + END, "malformed PAX header"),
    (header("big", kind=b"L", size=1 << 30) + END, "does not fit"),  # a 1 GiB long name: never read
    (header("m", mode_field=b"zzzzzzz\0") + END, "not a number"),
    # base-256 and PAX numbers out of what a member can have: "internal error: OverflowError" before
    (GOOD + header("bin/evil", mode_field=base256(-1, 8)) + END, "'bin/evil': mode -1 is out of range"),
    (header("m", mode_field=base256(1 << 40, 8)) + END, "'m': mode 1099511627776 is out of range"),
    (pax({"uid": "99999999999999999999"}) + member("u") + END, "'u': uid 99999999999999999999 is out of range"),
    (pax({"gid": "4294967296"}) + member("g") + END, "'g': gid 4294967296 is out of range"),
    (header("huge", size_field=base256(1 << 80, 12)) + END, "'huge': size 1208925819614629174706176 is out"),
    (pax({"uid": "\u0663"}) + member("u") + END, "PAX uid='\u0663'"),  # an Arabic-Indic 3: isdigit() took it
    (pax({"size": "\uff13"}) + member("s") + END, "PAX size='\uff13'"),  # a fullwidth 3
    (pax({"uid": "\u00b2"}) + member("u") + END, "PAX uid='\u00b2'"),  # isdigit() took it, int() refused it
    (bytes(range(256)) * 8, "bad tar header checksum"),  # not a tar at all
    (GOOD + header("cut")[:300], "ends inside a tar header"),  # the last member silently vanished before
    (GOOD + member(".wh."), "names no file"),
    (GOOD + member("dangling", kind=b"2", linkname=""), "empty target"),
])
def test_malformed_layers_are_one_clear_error(tmp_path: Path, layer: bytes, says: str) -> None:
    ran, out = convert(tmp_path, [layer], timeout=30)
    clean_failure(ran, 1, says=says)
    assert not out.exists()


def named(name: str, data: bytes = b"", **fields: object) -> bytes:
    """A member of any name length (a PAX path record for long ones)."""
    if len(name) < 100:
        return member(name, data, **fields)
    return pax({"path": name}) + member("long", data, **fields)


def test_whiteouts_over_a_tree_1200_deep_give_an_image_unsquashfs_reads(tmp_path: Path) -> None:
    chain = ["/".join(["d"] * n) for n in range(1, 1201)]
    lower = b"".join(named(path + "/", kind=b"5", mode=0o755) for path in chain)
    lower += named(chain[-1] + "/bottom", b"x") + named("top/", kind=b"5", mode=0o755)
    lower += b"".join(named("top/" + path.replace("d", "t") + "/", kind=b"5", mode=0o755) for path in chain)
    lower += named("keep/", kind=b"5", mode=0o755) + named("keep/k", b"k")
    # removing /d and hiding everything under /top walked the tree recursively: RecursionError at ~1000 levels
    upper = member(".wh.d") + member("top/.wh..wh..opq") + member("top/new", b"n") + END
    ran, out = convert(tmp_path, [lower + END, upper], timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    listing = unsquashfs_lists(out)
    assert "squashfs-root/top/new" in listing and "squashfs-root/keep/k" in listing
    paths = {line[line.index("squashfs-root"):].split(" -> ")[0] for line in listing.splitlines() if "squashfs-root" in line}
    assert "squashfs-root/d" not in paths and not any(p.startswith("squashfs-root/top/t") for p in paths)


# --- image configs: wrong types are refused, odd values give scripts every reader accepts --------------------------
@pytest.mark.parametrize("config, says", [
    ({"config": {"Entrypoint": "/bin/sh -c x"}}, "Entrypoint must be a list"),  # was exec '/' 'b' 'i' 'n' …
    ({"config": {"Cmd": [1, 2]}}, "Cmd must be a list of strings"),
    ({"config": {"Env": {"A": "b"}}}, "Env must be a list"),
    ({"config": {"Labels": ["a"]}}, "Labels must be an object"),
    ({"config": {"Labels": {"a": {"b": 1}}}}, "Labels must map names to strings"),
    ({"config": {"WorkingDir": 5}}, "WorkingDir must be a string"),
    ({"config": ["x"]}, "config must be a JSON object"),
    ({"architecture": 5}, "architecture must be a string"),
    ({"config": {"Volumes": {"/data/../../etc": {}}}}, "without '..'"),  # an fstab bind of a host path
    ({"config": {"Volumes": {"data": {}}}}, "absolute path"),
])
def test_config_values_of_the_wrong_type_or_shape_are_refused(tmp_path: Path, config: dict, says: str) -> None:
    blob = json.loads(config_blob([GOOD + END]))
    blob.update({k: v for k, v in config.items() if k != "config"})
    if "config" in config:
        blob["config"] = config["config"]
    ran, out = convert(tmp_path, [GOOD + END], config=json.dumps(blob).encode())
    clean_failure(ran, 1, says=says)
    assert not out.exists()


def test_a_deeply_nested_config_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    blob = json.loads(config_blob([GOOD + END]))
    text = json.dumps(blob)[:-1] + ', "deep": ' + "[" * 50_000 + "]" * 50_000 + "}"
    ran, out = convert(tmp_path, [GOOD + END], config=text.encode())
    clean_failure(ran, 1, says="nests")


def test_an_env_name_with_a_newline_leaves_env_scripts_dash_runs(tmp_path: Path) -> None:
    blob = json.loads(config_blob([GOOD + END]))
    blob["config"]["Env"] = ["FOO\n=bad", "GOOD=yes", "PATH=/bin"]
    ran, out = convert(tmp_path, [GOOD + END], "sif", config=json.dumps(blob).encode())
    assert ran.returncode == 0, ran.stderr
    assert "'FOO\\n' is not a valid variable name" in ran.stderr  # skipped with a warning, as apptainer does
    from buildkit.image.sif.read import read_sif

    offset = read_sif(out).primary_partition().offset  # type: ignore[union-attr]
    script = subprocess.run(["unsquashfs", "-o", str(offset), "-cat", str(out),
                             ".singularity.d/env/10-docker2singularity.sh"], capture_output=True, text=True,
                            check=True).stdout
    shown = subprocess.run(["dash", "-c", f'{script}\nprintf "%s|%s" "$GOOD" "$PATH"'], capture_output=True,
                           text=True, check=False, env={})
    assert shown.returncode == 0 and shown.stdout == "yes|/bin", shown.stderr


def test_65535_distinct_owners_are_refused_clearly_for_a_sif(tmp_path: Path) -> None:
    files = b"".join(header(f"f{n}", uid=n) for n in range(1, 65_536))  # 65,535 uids + gid 0: one id too many
    ran, out = convert(tmp_path, [files + END], "sif", timeout=120)
    clean_failure(ran, 1, says="more than 65535 distinct uids/gids")
    assert not out.exists()


# --- memory: decompression streams -------------------------------------------------------------------------------
def zeros_layer_gz(size: int) -> bytes:
    """A tar of one file of ``size`` zero bytes, gzipped (a thousandfold expansion)."""
    body = header("zeros", size=size)
    squeeze = zlib.compressobj(6, zlib.DEFLATED, 31)
    parts = [squeeze.compress(body)]
    chunk = bytes(1 << 20)
    for _ in range(size >> 20):
        parts.append(squeeze.compress(chunk))
    parts.append(squeeze.compress(END) + squeeze.flush())
    return b"".join(parts)


def test_gzip_bombs_cost_no_more_memory_than_any_layer(tmp_path: Path) -> None:
    bomb = zeros_layer_gz(512 << 20)
    assert len(bomb) < 1 << 20
    source = _gz_layout(tmp_path / "layout", [bomb, bomb])
    out = tmp_path / "out.sqsh"
    ran = run("convert", source, "--to", "sqsh", "-o", str(out), env={"CKIT_CACHE_DIR": str(tmp_path / "cache")},
              timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.max_rss < MEMORY_CEILING, f"peak memory {ran.max_rss >> 20} MiB for two 512 MiB layers"


def _gz_layout(path: Path, packed: list[bytes]) -> str:
    """An OCI layout of already-gzipped layers (diff_ids hashed while streaming the decompression)."""
    import hashlib

    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    diff_ids = []
    for data in packed:
        h, d = hashlib.sha256(), zlib.decompressobj(31)
        for at in range(0, len(data), 1 << 16):
            h.update(d.decompress(data[at:at + (1 << 16)]))
        diff_ids.append("sha256:" + h.hexdigest())
        (blobs / sha(data).split(":")[1]).write_bytes(data)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    (blobs / sha(config).split(":")[1]).write_bytes(config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": sha(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": sha(p), "size": len(p)} for p in packed]}).encode()
    (blobs / sha(manifest).split(":")[1]).write_bytes(manifest)
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha(manifest),
        "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": "bomb"}}]}))
    (path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return f"oci:{path}:bomb"


# --- docker archives: manifest.json of the wrong shape, members that are not what they claim ------------------------
@pytest.mark.parametrize("manifest, says", [
    ([{"Config": 5, "Layers": []}], "Config must be a string"),
    ([{"Config": "config.json", "Layers": "l0/layer.tar"}], "Layers must be a list"),
    ({"Config": "config.json"}, "must be a JSON list"),
    ([], "lists no image"),
    ("[" * 100_000, "nests too deeply"),
])
def test_docker_archive_manifests_of_the_wrong_shape_are_refused(tmp_path: Path, manifest: object,
                                                                 says: str) -> None:
    import io
    import tarfile

    archive = tmp_path / "image.tar"
    docker_archive(archive, [GOOD + END])
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    rewritten = tmp_path / "hostile.tar"
    with tarfile.open(archive) as src, tarfile.open(rewritten, "w") as dst:
        for info in src:
            data = src.extractfile(info).read()  # type: ignore[union-attr]
            if info.name == "manifest.json":
                data = text.encode()
                info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    out = tmp_path / "out.sqsh"
    ran = run("convert", f"docker-archive:{rewritten}", "--to", "sqsh", "-o", str(out),
              env={"CKIT_CACHE_DIR": str(tmp_path / "cache")})
    clean_failure(ran, 1, 2, 4, says=says)


def test_a_docker_archive_member_linked_to_a_device_is_not_read(tmp_path: Path) -> None:
    import io
    import tarfile

    archive = tmp_path / "image.tar"
    with tarfile.open(archive, "w") as tar:
        link = tarfile.TarInfo("manifest.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/dev/zero"
        tar.addfile(link)
        info = tarfile.TarInfo("config.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    ran = run("convert", f"docker-archive:{archive}", "--to", "sqsh", "-o", str(tmp_path / "o.sqsh"),
              env={"CKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=30)
    clean_failure(ran, 1, says="no member 'dev/zero'")


@pytest.mark.parametrize("form", ["docker-archive", "oci-archive"])
def test_an_archive_member_of_negative_size_is_refused(tmp_path: Path, form: str) -> None:
    """tarfile seeks before the archive's start for it: "cannot read or write: Invalid argument" before."""
    archive = tmp_path / "image.tar"
    archive.write_bytes(header("manifest.json", size_field=base256(-1536, 12)) + END)
    ran = run("convert", f"{form}:{archive}", "--to", "sqsh", "-o", str(tmp_path / "o.sqsh"),
              env={"CKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=30)
    clean_failure(ran, 1, 2, says=f"{archive} is not a readable tar archive")


# --- OCI layouts: indexes that nest, fan out or list themselves; blobs that are FIFOs -------------------------------
def test_an_index_json_nested_too_deep_is_refused(tmp_path: Path) -> None:
    source = oci_layout(tmp_path / "layout", [GOOD + END])
    (tmp_path / "layout" / "index.json").write_text('{"manifests": ' + "[" * 100_000 + "]" * 100_000 + "}")
    ran = run("convert", source, "--to", "sqsh", "-o", str(tmp_path / "o.sqsh"),
              env={"CKIT_CACHE_DIR": str(tmp_path / "cache")})
    clean_failure(ran, 4, says="index.json nests")


def test_a_blob_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    from tests.integration.hostile_images import layer_blob

    source = oci_layout(tmp_path / "layout", [GOOD + END], compress=False)
    blob = layer_blob(tmp_path / "layout")
    blob.unlink()
    os.mkfifo(blob)
    ran = run("convert", source, "--to", "sqsh", "-o", str(tmp_path / "o.sqsh"),
              env={"CKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=30)
    clean_failure(ran, 4, says="is not a regular file")


def fan_out_layout(path: Path, fan: int, depth: int) -> str:
    """An image index that lists the next one ``fan`` times, ``depth`` levels deep: ``fan ** depth`` visits
    for a walker that does not remember what it has seen."""
    oci_layout(path, [GOOD + END])
    desc = json.loads((path / "index.json").read_text())["manifests"][0]
    child = {k: desc[k] for k in ("mediaType", "digest", "size")}
    child["platform"] = {"architecture": "amd64", "os": "linux"}
    for _ in range(depth):
        data = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                           "manifests": [child] * fan}).encode()
        (path / "blobs" / "sha256" / sha(data).split(":")[1]).write_bytes(data)
        child = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": sha(data), "size": len(data),
                 "platform": {"architecture": "amd64", "os": "linux"}}
    top = {**child, "annotations": {"org.opencontainers.image.ref.name": "fan"}}
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    return f"oci:{path}:fan"


def test_pushing_an_index_that_fans_out_visits_each_manifest_once(tmp_path: Path) -> None:
    from tests.integration.hostile_registry import HostileServer, Seen

    manifests: dict[str, bytes] = {}

    def registry(request: Seen):  # type: ignore[no-untyped-def]
        path = request.path.split("?")[0]
        if request.method == "HEAD" and "/blobs/" in path:
            return 200, {}, b""  # every blob is there already: only manifests are pushed
        if request.method == "PUT" and "/manifests/" in path:
            manifests[path] = request.body
            return 201, {"Docker-Content-Digest": sha(request.body)}, b""
        return (200, {}, b"{}") if path == "/v2/" else (404, {}, b"")

    server = HostileServer(registry)
    source = fan_out_layout(tmp_path / "layout", fan=50, depth=6)  # 50**6 = 15.6 billion visits before
    with server:
        ran = run("push", source, f"{server.host}/team/app:1", env={"CKIT_CACHE_DIR": str(tmp_path / "c")},
                  timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    puts = [r for r in server.seen if r.method == "PUT"]
    assert len(puts) == 7  # the image manifest and six indexes, each once
