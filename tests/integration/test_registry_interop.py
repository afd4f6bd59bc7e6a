"""Interop with clients ckit did not write: skopeo reads images ckit pushed, the oras SDK pulls ckit's .sif
artifacts, and ckit reads images podman pushed."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import docker
import oras.client
import pytest

from buildkit.errors import RegistryError
from buildkit.registry.distribution.client import OCI_MANIFEST, RegistryClient
from buildkit.registry.distribution.reference import parse
from buildkit.registry.transfer.artifacts import SIF
from tests.integration.registry_helpers import ckit, fake_sif, unique_repo


def _skopeo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["skopeo", *args], capture_output=True, text=True, check=True, timeout=300)  # noqa: S603,S607


def _save_archive(image: str, path: Path) -> Path:
    with path.open("wb") as out:
        for chunk in docker.from_env().images.get(image).save(named=True):
            out.write(chunk)
    return path


def test_oras_sdk_pulls_a_sif_ckit_pushed(registry, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "image.sif")
    repo = unique_repo()
    ref = f"{registry.host}/{repo}:v1"
    assert ckit("push", str(sif), ref, "--stack", "demo").returncode == 0
    client = oras.client.OrasClient(hostname=registry.host, insecure=True)
    manifest = client.get_manifest(ref)
    assert manifest["config"]["mediaType"] == "application/vnd.sylabs.sif.config.v1+json"
    assert manifest["layers"][0]["mediaType"] == "appliciation/vnd.sylabs.sif.layer.tar"  # every singularity pulls it
    assert manifest["annotations"]["io.ckit.stack"] == "demo"
    files = client.pull(target=ref, outdir=str(tmp_path / "oras"))
    assert [Path(f).name for f in files] == ["image.sif"]
    assert Path(files[0]).read_bytes() == sif.read_bytes()


def test_ckit_pulls_a_sif_the_oras_sdk_pushed(registry, tmp_path: Path, monkeypatch) -> None:
    sif = fake_sif(tmp_path / "from-oras.sif")
    ref = f"{registry.host}/{unique_repo()}:v1"
    monkeypatch.chdir(tmp_path)
    client = oras.client.OrasClient(hostname=registry.host, insecure=True)
    empty = tmp_path / "config.json"
    empty.write_text("{}")
    response = client.push(target=ref, files=[f"from-oras.sif:{SIF.layer_type}"],
                           manifest_config=f"config.json:{SIF.config_type}")
    assert response.status_code == 201
    pulled = ckit("pull", ref, "-o", str(tmp_path / "out"))
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "out" / "from-oras.sif").read_bytes() == sif.read_bytes()


def test_docker_archive_push_is_read_by_skopeo_and_repush_sends_nothing(registry, podman, busybox_image,
                                                                        tmp_path: Path) -> None:
    archive = _save_archive(busybox_image, tmp_path / "busybox.tar")
    ref = f"{registry.host}/{unique_repo()}:archive"
    first = ckit("push", f"docker-archive:{archive}", ref, "--format", "oci", "--stack", "busybox-demo", "--json",
                 env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["kind"] == "image" and out["uploaded_bytes"] == out["size"] > 0
    again = json.loads(ckit("push", f"docker-archive:{archive}", ref, "--format", "oci", "--stack", "busybox-demo",
                            "--json", env={"SOURCE_DATE_EPOCH": "1700000000"}).stdout)
    assert again["uploaded_bytes"] == 0
    assert again["digest"] == out["digest"]  # same bytes, same annotations: the same manifest

    inspected = json.loads(_skopeo("inspect", "--tls-verify=false", f"docker://{ref}").stdout)
    assert inspected["Digest"] == out["digest"]
    raw = json.loads(_skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{ref}").stdout)
    assert raw["mediaType"] == OCI_MANIFEST
    assert [x["mediaType"] for x in raw["layers"]] == ["application/vnd.oci.image.layer.v1.tar+gzip"]
    assert raw["annotations"]["io.ckit.stack"] == "busybox-demo"
    assert raw["annotations"]["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"
    layout = tmp_path / "layout"
    _skopeo("copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{layout}:copied")
    assert (layout / "index.json").is_file()

    # the layout skopeo wrote goes up with `ckit push oci:` as it is (its own gzip blobs); a repeat sends nothing
    ref2 = f"{registry.host}/{unique_repo()}:from-layout"
    layout_push = ckit("push", f"oci:{layout}:copied", ref2, "--json")
    assert layout_push.returncode == 0, layout_push.stderr
    assert json.loads(layout_push.stdout)["uploaded_bytes"] > 0
    assert json.loads(ckit("push", f"oci:{layout}:copied", ref2, "--json").stdout)["uploaded_bytes"] == 0
    index = json.loads((layout / "index.json").read_text())
    top = index["manifests"][0]["digest"].split(":")[1]
    layers = [x["digest"] for x in json.loads((layout / "blobs" / "sha256" / top).read_text())["layers"]]
    assert json.loads(_skopeo("inspect", "--tls-verify=false", f"docker://{ref2}").stdout)["Layers"] == layers


def test_docker_archive_push_is_docker_schema_2_with_gzip_layers(registry, podman, busybox_image,
                                                                 tmp_path: Path) -> None:
    """The default for an archive: the manifest type the archive had (Docker schema 2), layers compressed, the
    compressed bytes the same on every push (so a second repository gets the same digests)."""
    archive = _save_archive(busybox_image, tmp_path / "busybox.tar")
    with tarfile.open(archive) as tar:
        raw_layers = sum(m.size for m in tar if m.name.endswith(".tar"))
    digests = []
    for _ in range(2):
        ref = f"{registry.host}/{unique_repo()}:v2"
        pushed = ckit("push", f"docker-archive:{archive}", ref, "--stack", "s", "--json")
        assert pushed.returncode == 0, pushed.stderr
        out = json.loads(pushed.stdout)
        assert out["media_type"] == "application/vnd.docker.distribution.manifest.v2+json"
        assert out["annotations"] == {} and "carries no annotations" in out["notes"][0]
        assert "carries no annotations" in pushed.stderr
        raw = json.loads(_skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{ref}").stdout)
        assert raw["config"]["mediaType"] == "application/vnd.docker.container.image.v1+json"
        assert [x["mediaType"] for x in raw["layers"]] == ["application/vnd.docker.image.rootfs.diff.tar.gzip"]
        assert sum(x["size"] for x in raw["layers"]) < raw_layers * 0.7  # compressed (ckit sent 1:1 tar before)
        digests.append(out["digest"])
    assert digests[0] == digests[1]


def test_ckit_reads_every_blob_of_an_image_podman_pushed(registry, podman, busybox_image, podman_tags) -> None:
    engine = docker.from_env()
    repo = unique_repo()
    engine.images.get(busybox_image).tag(f"{registry.host}/{repo}", "podman")
    podman_tags(f"{registry.host}/{repo}:podman")
    items = list(engine.api.push(f"{registry.host}/{repo}", tag="podman", stream=True, decode=True))
    assert not [i for i in items if "error" in i], items
    client = RegistryClient.for_reference(parse(f"{registry.host}/{repo}:podman"))
    manifest = client.get_manifest(repo, "podman")
    assert manifest.media_type in (OCI_MANIFEST, "application/vnd.docker.distribution.manifest.v2+json")
    body = manifest.json()
    for desc in [body["config"], *body["layers"]]:
        with client.open_blob(repo, desc["digest"], desc["size"]) as blob:
            data = blob.read()
        assert len(data) == desc["size"] and blob.verified


def test_docker_daemon_push_goes_through_ckits_client_with_auth(registry_auth, podman, busybox_image,
                                                                tmp_path: Path) -> None:
    ref = f"{registry_auth.host}/{unique_repo()}:engine"
    env = {"CKIT_REGISTRY_USER": registry_auth.username, "CKIT_REGISTRY_PASSWORD": registry_auth.password,
           "DOCKER_CONFIG": str(tmp_path / "dc")}
    pushed = ckit("push", f"docker-daemon:{busybox_image}", ref, "--stack", "engine-demo", "--format", "oci", "--json",
                  env=env)
    assert pushed.returncode == 0, pushed.stderr
    out = json.loads(pushed.stdout)
    assert out["uploaded_bytes"] > 0 and out["kind"] == "image"  # ckit sent the blobs, not the engine
    raw = json.loads(_skopeo("inspect", "--raw", "--tls-verify=false", "--creds",
                             f"{registry_auth.username}:{registry_auth.password}", f"docker://{ref}").stdout)
    assert raw["annotations"]["io.ckit.stack"] == "engine-demo"
    bad = ckit("push", f"docker-daemon:{busybox_image}", ref,
               env={**env, "CKIT_REGISTRY_PASSWORD": "wrong-pass-123"})
    assert bad.returncode == 1
    assert "wrong-pass-123" not in bad.stderr
    assert bad.stderr.startswith("ckit: error: ") and registry_auth.host in bad.stderr.splitlines()[0]


def test_docker_archive_with_a_named_image_is_the_same_source_for_push_and_convert(registry, podman, busybox_image,
                                                                                   tmp_path: Path) -> None:
    """``docker-archive:PATH:REF`` (the SOURCE grammar's one parser): push used to take it as a file name."""
    archive = _save_archive(busybox_image, tmp_path / "busybox.tar")
    source = f"docker-archive:{archive}:{busybox_image}"
    pushed = ckit("push", source, f"{registry.host}/{unique_repo()}:named", "--json")
    assert pushed.returncode == 0, pushed.stderr
    converted = ckit("convert", source, "--to", "sqsh", "-o", str(tmp_path / "named.sqsh"),
                     env={"CKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert converted.returncode == 0, converted.stderr
    wrong = ckit("push", f"docker-archive:{archive}:localhost/nope:1", f"{registry.host}/{unique_repo()}:x")
    assert wrong.returncode == 2 and "no image tagged 'localhost/nope:1'" in wrong.stderr


def test_oci_archive_is_a_source_for_convert_and_push(registry, podman, busybox_image, tmp_path: Path) -> None:
    archive = _save_archive(busybox_image, tmp_path / "busybox.tar")
    oci_tar = tmp_path / "busybox-oci.tar"
    _skopeo("copy", f"docker-archive:{archive}", f"oci-archive:{oci_tar}:v1")
    ref = f"{registry.host}/{unique_repo()}:oci-archive"
    pushed = ckit("push", f"oci-archive:{oci_tar}:v1", ref, "--json")
    assert pushed.returncode == 0, pushed.stderr
    assert json.loads(pushed.stdout)["media_type"] == OCI_MANIFEST
    _skopeo("copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{tmp_path / 'back'}:v1")  # blobs verified
    out = tmp_path / "from-oci-archive.sif"
    converted = ckit("convert", f"oci-archive:{oci_tar}", "--to", "sif", "-o", str(out),
                     env={"CKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert converted.returncode == 0, converted.stderr
    deffile = subprocess.run(["siftool", "dump", "1", str(out)], capture_output=True, check=True).stdout  # noqa: S603,S607
    assert deffile.startswith(b"bootstrap: oci-archive\nfrom: ")


def test_pull_to_sqsh_converts_an_image_podman_pushed(registry, podman, busybox_image, tmp_path: Path,
                                                      podman_tags) -> None:
    engine = docker.from_env()
    repo = unique_repo()
    engine.images.get(busybox_image).tag(f"{registry.host}/{repo}", "convert")
    podman_tags(f"{registry.host}/{repo}:convert")
    items = list(engine.api.push(f"{registry.host}/{repo}", tag="convert", stream=True, decode=True))
    assert not [i for i in items if "error" in i], items
    ref = f"{registry.host}/{repo}:convert"
    plain = ckit("pull", ref, "-o", str(tmp_path / "plain"))
    assert plain.returncode == 2
    assert "is a container image, not a .sif/.sqsh artifact" in plain.stderr
    pulled = ckit("pull", ref, "--to", "sqsh", "-o", str(tmp_path / "out"), "--json",
                  env={"CKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert pulled.returncode == 0, pulled.stderr
    data = json.loads(pulled.stdout)
    path = Path(data["path"])
    assert path.parent == tmp_path / "out" and path.read_bytes()[:4] == b"hsqs"
    listing = subprocess.run(["unsquashfs", "-l", str(path)], capture_output=True, text=True,  # noqa: S603,S607
                             check=True).stdout
    assert "squashfs-root/bin/busybox" in listing


def test_push_dry_run_shows_the_plan_and_contacts_no_registry(podman, busybox_image, tmp_path: Path) -> None:
    archive = _save_archive(busybox_image, tmp_path / "busybox.tar")
    nowhere = "127.0.0.1:5999/team/app:1"  # nothing listens there
    shown = ckit("push", f"docker-archive:{archive}", nowhere, "--dry-run", "--json")
    assert shown.returncode == 0, shown.stderr
    planned = json.loads(shown.stdout)
    assert planned["dry_run"] and planned["media_type"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert [x["action"] for x in planned["layers"]] == ["gzip, then send"]
    engine = json.loads(ckit("push", f"docker-daemon:{busybox_image}", nowhere, "--format", "oci", "--dry-run",
                             "--json").stdout)
    assert engine["engine_image"] == docker.from_env().images.get(busybox_image).id
    assert engine["media_type"] == OCI_MANIFEST
    text = ckit("push", f"docker-archive:{archive}", nowhere, "--dry-run")
    assert text.stdout.splitlines()[0] == f"would push docker-archive docker-archive:{archive} to {nowhere}"


def test_a_layer_that_does_not_match_its_diff_id_is_never_pushed(registry, podman, busybox_image,
                                                                 tmp_path: Path) -> None:
    """The archive's layer is altered in place (same size): compressing it checks the config's diff_id first."""
    archive = _save_archive(busybox_image, tmp_path / "busybox.tar")
    with tarfile.open(archive) as tar:
        layer = next(m for m in tar if m.isfile() and m.name.endswith(".tar"))
    with archive.open("r+b") as f:
        f.seek(layer.offset_data + layer.size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    ref = f"{registry.host}/{unique_repo()}:tampered"
    pushed = ckit("push", f"docker-archive:{archive}", ref, env={"CKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert pushed.returncode == 4, pushed.stderr
    assert "does not match its diff_id" in pushed.stderr.splitlines()[0]
    target = parse(ref)
    with pytest.raises(RegistryError, match="not found"):
        RegistryClient.for_reference(target).get_manifest(target.repository, "tampered")
