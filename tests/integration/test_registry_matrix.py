"""The cross-client matrix, on the three kinds of registry (plain :5000, htpasswd :5001, token auth on a free port).

What ckit pushes is pulled by podman, by skopeo (``inspect`` and ``copy``), by the oras SDK (artifacts), by
``curl -I`` exactly as enroot probes a manifest before an import (no Accept header, so curl's ``Accept: */*``;
enroot 4.1.2 itself in tests/integration/test_pyxis_*.py), and by ckit itself; what podman, skopeo and the oras SDK push is pulled by ckit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker
import oras.client
import pytest

from buildkit.registry.transfer.artifacts import SIF
from tests.infra.registry import PASSWORD, USERNAME
from tests.integration.registry_helpers import ckit, fake_sif, unique_repo
from tests.integration.tokenserver import TokenRegistry, TokenServer

DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Target:
    """One registry as every client is told about it."""

    kind: str  # plain, htpasswd, token
    host: str
    username: str | None = None
    password: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # for ckit

    @property
    def creds(self) -> list[str]:
        return ["--creds", f"{self.username}:{self.password}"] if self.username else []

    def oras(self, push_to: str | None = None) -> oras.client.OrasClient:
        client = oras.client.OrasClient(hostname=self.host, insecure=True,
                                        auth_backend="basic" if self.kind == "htpasswd" else "token")
        if self.username:
            client.auth.set_basic_auth(self.username, self.password)  # never writes ~/.docker/config.json
        if self.kind == "token" and push_to:
            # oras-py 0.2 keeps one token for every scope: the pull token its first request gets would be
            # sent with the upload too, so it is handed a pull,push token for the repository up front.
            client.auth.set_token_auth(self.token(f"repository:{push_to}:pull,push"))
        return client

    def token(self, scope: str) -> str:
        status, headers = _head(f"http://{self.host}/v2/")
        params = dict(re.findall(r'(\w+)="([^"]*)"', headers["www-authenticate"]))
        reply = run("curl", "-sSfG", "-u", f"{self.username}:{self.password}", "--data-urlencode",
                    f"service={params['service']}", "--data-urlencode", f"scope={scope}", params["realm"])
        return json.loads(reply.stdout)["token"]


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = TokenServer(tmp_path_factory.mktemp("token"), USERNAME, PASSWORD).start()
    registry = TokenRegistry(server)
    registry.start()
    try:
        yield registry.host
    finally:
        registry.stop()
        server.stop()
        shutil.rmtree(registry.home, ignore_errors=True)


@pytest.fixture(params=["plain", "htpasswd", "token"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "plain":
        return Target("plain", request.getfixturevalue("registry").host)
    host = (request.getfixturevalue("registry_auth").host if request.param == "htpasswd"
            else request.getfixturevalue("token_registry"))
    env = {"CKIT_REGISTRY_USER": USERNAME, "CKIT_REGISTRY_PASSWORD": PASSWORD, "DOCKER_CONFIG": str(tmp_path / "dc")}
    return Target(request.param, host, USERNAME, PASSWORD, env)


@pytest.fixture(scope="module")
def busybox_archive(podman, busybox_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("archive") / "busybox.tar"
    with path.open("wb") as out:
        for chunk in docker.from_env().images.get(busybox_image).save(named=True):
            out.write(chunk)
    return path


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=300)  # noqa: S603


def enroot_probe(target: Target, repo: str, reference: str) -> tuple[int, dict[str, str]]:
    """``curl -I`` on the manifest as enroot's docker::_authenticate sends it (no Accept header: ``*/*``),
    answering a 401 as enroot does (a Bearer token from the realm, or Basic credentials), then probing again."""
    url = f"http://{target.host}/v2/{repo}/manifests/{reference}"
    status, headers = _head(url)
    challenge = headers.get("www-authenticate", "")
    if status == 401 and challenge.startswith("Bearer "):
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm")
        args = [a for k, v in params.items() for a in ("--data-urlencode", f"{k}={v}")]
        token = json.loads(run("curl", "-sSfG", "-u", f"{target.username}:{target.password}", *args, realm).stdout)
        status, headers = _head(url, "-H", f"Authorization: Bearer {token.get('token') or token['access_token']}")
    elif status == 401 and challenge.startswith("Basic "):
        status, headers = _head(url, "-u", f"{target.username}:{target.password}")
    return status, headers


def _head(url: str, *extra: str) -> tuple[int, dict[str, str]]:
    out = run("curl", "-sSI", *extra, "--", url).stdout.replace("\r", "")
    lines = out.strip().splitlines()
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers


def _manifest(target: Target, ref: str) -> dict:
    tls = ["--tls-verify=false", *target.creds]
    return json.loads(run("skopeo", "inspect", "--raw", *tls, f"docker://{ref}").stdout)


def test_what_ckit_pushes_every_client_pulls(target: Target, podman, busybox_archive: Path, tmp_path: Path) -> None:
    repo = unique_repo("matrix")
    ref = f"{target.host}/{repo}:2"
    pushed = ckit("push", f"docker-archive:{busybox_archive}", ref, "--json", env=target.env)
    assert pushed.returncode == 0, pushed.stderr
    out = json.loads(pushed.stdout)
    assert out["media_type"] == DOCKER_V2 and 0 < out["uploaded_bytes"] == out["size"]
    again = json.loads(ckit("push", f"docker-archive:{busybox_archive}", ref, "--json", env=target.env).stdout)
    assert again["uploaded_bytes"] == 0 and again["digest"] == out["digest"]  # the same gzip bytes: the same digest

    # enroot / Pyxis: the probe by tag answers 200 (distribution rewrites a schema 2 manifest to schema 1 for
    # `Accept: */*`, so that answer carries the rewrite's digest); by digest it is the manifest ckit pushed.
    assert enroot_probe(target, repo, "2")[0] == 200
    status, headers = enroot_probe(target, repo, out["digest"])
    assert status == 200 and headers["docker-content-digest"] == out["digest"]
    manifest = _manifest(target, ref)
    assert manifest["mediaType"] == DOCKER_V2
    assert [x["mediaType"] for x in manifest["layers"]] == ["application/vnd.docker.image.rootfs.diff.tar.gzip"]

    tls = ["--tls-verify=false", *target.creds]
    assert json.loads(run("skopeo", "inspect", *tls, f"docker://{ref}").stdout)["Digest"] == out["digest"]
    run("skopeo", "copy", "-q", "--src-tls-verify=false", *(["--src-creds", tls[2]] if target.username else []),
        f"docker://{ref}", f"oci:{tmp_path / 'copy'}:2")  # skopeo checks every blob's digest as it copies

    image = run("podman", "pull", "-q", *tls, ref).stdout.strip()
    try:
        assert "sha256:" + image == manifest["config"]["digest"]
        assert run("podman", "run", "--rm", ref, "/bin/busybox", "echo", "ran").stdout.strip() == "ran"
    finally:
        run("podman", "rmi", "-f", ref, check=False)

    own = ckit("pull", ref, "--to", "sqsh", "-o", str(tmp_path / "own"), "--json",
               env={**target.env, "CKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert own.returncode == 0, own.stderr
    assert json.loads(own.stdout)["digest"] == out["digest"]
    listing = run("unsquashfs", "-l", json.loads(own.stdout)["path"]).stdout
    assert "squashfs-root/bin/busybox" in listing


def test_an_oci_layout_keeps_its_type_unless_told_and_enroot_needs_docker(target: Target, podman,
                                                                         busybox_archive: Path,
                                                                         tmp_path: Path) -> None:
    """An OCI manifest is what distribution 2.8 hides from enroot's probe (404); ``--format docker`` fixes it."""
    layout = tmp_path / "layout"
    run("skopeo", "copy", "-q", f"docker-archive:{busybox_archive}", f"oci:{layout}:v1")
    repo = unique_repo("matrix")
    oci = ckit("push", f"oci:{layout}:v1", f"{target.host}/{repo}:oci", "--json", env=target.env)
    assert oci.returncode == 0, oci.stderr
    assert json.loads(oci.stdout)["media_type"] == OCI_MANIFEST
    assert enroot_probe(target, repo, "oci")[0] == 404
    docker_format = ckit("push", f"oci:{layout}:v1", f"{target.host}/{repo}:docker", "--format", "docker", "--json",
                         env=target.env)
    assert docker_format.returncode == 0, docker_format.stderr
    out = json.loads(docker_format.stdout)
    assert out["media_type"] == DOCKER_V2 and out["uploaded_bytes"] < 1000  # the layer blob is already there
    assert enroot_probe(target, repo, "docker")[0] == 200
    assert enroot_probe(target, repo, out["digest"])[1]["docker-content-digest"] == out["digest"]
    assert _manifest(target, f"{target.host}/{repo}:docker")["layers"] == \
        [{**x, "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip"}
         for x in _manifest(target, f"{target.host}/{repo}:oci")["layers"]]


def test_ckit_artifacts_pulled_by_the_oras_sdk_and_by_ckit(target: Target, tmp_path: Path, monkeypatch) -> None:
    sif = fake_sif(tmp_path / "app.sif")
    ref = f"{target.host}/{unique_repo('matrix')}:sif"
    pushed = ckit("push", str(sif), ref, "--stack", "demo", "--json", env=target.env)
    assert pushed.returncode == 0, pushed.stderr
    client = target.oras()
    manifest = client.get_manifest(ref)
    assert manifest["config"]["mediaType"] == SIF.config_type
    assert [x["mediaType"] for x in manifest["layers"]] == [SIF.layer_type]
    files = client.pull(target=ref, outdir=str(tmp_path / "oras"))
    assert Path(files[0]).read_bytes() == sif.read_bytes()
    own = ckit("pull", ref, "-o", str(tmp_path / "own"), env=target.env)
    assert own.returncode == 0, own.stderr
    assert (tmp_path / "own" / "app.sif").read_bytes() == sif.read_bytes()
    assert (tmp_path / "own" / "app.sif").stat().st_mode & 0o777 == 0o755 & ~_umask()


def test_what_podman_skopeo_and_oras_push_ckit_pulls(target: Target, podman, busybox_image: str,
                                                     busybox_archive: Path, tmp_path: Path, monkeypatch) -> None:
    tls = ["--tls-verify=false", *target.creds]
    repo = unique_repo("matrix")
    env = {**target.env, "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    run("podman", "push", "-q", *tls, busybox_image, f"{target.host}/{repo}:podman")
    run("skopeo", "copy", "-q", "--dest-tls-verify=false", *(["--dest-creds", tls[2]] if target.username else []),
        f"docker-archive:{busybox_archive}", f"docker://{target.host}/{repo}:skopeo")
    for tag, to in (("podman", "sif"), ("skopeo", "sqsh")):
        pulled = ckit("pull", f"{target.host}/{repo}:{tag}", "--to", to, "-o", str(tmp_path / tag), "--json", env=env)
        assert pulled.returncode == 0, pulled.stderr
        assert Path(json.loads(pulled.stdout)["path"]).stat().st_size > 0

    sif = fake_sif(tmp_path / "from-oras.sif")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    response = target.oras(push_to=repo).push(target=f"{target.host}/{repo}:oras", files=[f"from-oras.sif:{SIF.layer_type}"],
                                  manifest_config=f"config.json:{SIF.config_type}")
    assert response.status_code == 201
    pulled = ckit("pull", f"{target.host}/{repo}:oras", "-o", str(tmp_path / "oras"), env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "oras" / "from-oras.sif").read_bytes() == sif.read_bytes()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_engine_images_go_through_ckits_client_to_any_registry(target: Target, podman, busybox_image: str) -> None:
    """``docker-daemon:`` is read out of the engine and pushed by ckit: the token registry's free port is in no
    ``registries.conf``, where the engine's own push would refuse its plain http."""
    ref = f"{target.host}/{unique_repo('matrix')}:engine-{uuid.uuid4().hex[:6]}"
    pushed = ckit("push", f"docker-daemon:{busybox_image}", ref, "--json", env=target.env)
    assert pushed.returncode == 0, pushed.stderr
    out = json.loads(pushed.stdout)
    assert out["media_type"] == DOCKER_V2 and out["uploaded_bytes"] > 0
    config = docker.from_env().images.get(busybox_image).id
    assert _manifest(target, ref)["config"]["digest"] == config  # the engine's own image, byte for byte


EMPTY_LAYER = "sha256:a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4"  # schema 1's gzipped empty tar


def test_the_nodes_of_a_job_probing_a_fresh_push_at_once_all_get_it(registry, podman, busybox_image: str,
                                                                    tmp_path: Path) -> None:
    """Distribution 2.8 answers enroot's probe of a schema 2 manifest with a schema 1 rewrite, which stores the empty
    layer's blob in the repository on first use (any image with a LABEL or ENV has one). Probes at once race on that
    write: about 1 in 100 got 400 "manifest invalid", and a two-node Pyxis job failed on it. ckit's push asks once,
    so the blob is there before any node asks."""
    (tmp_path / "Containerfile").write_text(f"FROM {busybox_image}\nLABEL io.ckit.test=probe\n")
    tag = f"localhost/ckit-test/probe:{uuid.uuid4().hex[:8]}"
    run("podman", "build", "-q", "-t", tag, str(tmp_path))
    try:
        repo = unique_repo("probe")
        pushed = ckit("push", f"docker-daemon:{tag}", f"{registry.host}/{repo}:1")
        assert pushed.returncode == 0, pushed.stderr
        assert _head(f"http://{registry.host}/v2/{repo}/blobs/{EMPTY_LAYER}")[0] == 200
        url = f"http://{registry.host}/v2/{repo}/manifests/1"
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(lambda _: _head(url)[0], range(8))) == [200] * 8
    finally:
        run("podman", "rmi", "-f", tag, check=False)
