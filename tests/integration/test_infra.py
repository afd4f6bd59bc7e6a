"""Smoke tests of the real components the integration tests stand on (tests/infra)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import uuid

import docker
import pytest
import requests

from tests.infra.containers import run_container
from tests.infra.registry import RegistryInfo

DOCKERFILE = b"""\
FROM localhost/busybox:1.36
RUN echo built > /built.txt
RUN mkdir -p /opt/ckit && echo "$(cat /built.txt) twice" > /opt/ckit/out.txt
CMD ["cat", "/opt/ckit/out.txt"]
"""


@pytest.fixture(scope="module")
def client(podman) -> docker.DockerClient:
    return docker.from_env()


@pytest.fixture(scope="module")
def built_image(client: docker.DockerClient, busybox_image: str):
    suffix = uuid.uuid4().hex[:8]  # per session: concurrent sessions share the store and the registries
    tag = f"localhost/ckit-infra-smoke:{suffix}"
    image, _log = client.images.build(fileobj=io.BytesIO(DOCKERFILE), tag=tag, rm=True)
    yield image, tag, suffix
    # untag only: a concurrent session may have built the very same image id
    for ref in [tag, *(t for t in client.images.get(tag).tags if t.endswith(suffix) and t != tag)]:
        with contextlib.suppress(docker.errors.NotFound):
            client.images.remove(ref)


def test_podman_service_answers_the_docker_sdk(client: docker.DockerClient, podman) -> None:
    assert client.ping() is True
    assert podman.docker_host.startswith("unix:///")
    assert client.version()["Components"][0]["Name"] == "Podman Engine"


def test_build_and_run_on_busybox(client: docker.DockerClient, built_image) -> None:
    _image, tag, _suffix = built_image
    assert run_container(client, tag) == (0, b"built twice\n")


def _push(client: docker.DockerClient, ref: str, **kwargs) -> list[dict]:
    return list(client.images.push(ref, stream=True, decode=True, **kwargs))


def test_push_to_plain_registry(client: docker.DockerClient, built_image, registry: RegistryInfo) -> None:
    image, _tag, suffix = built_image
    assert registry.url == "127.0.0.1:5000"
    repo = f"{registry.host}/ckit/infra-smoke"
    image.tag(repo, f"plain-{suffix}")
    items = _push(client, f"{repo}:plain-{suffix}")
    assert not [i for i in items if "error" in i], items
    tags = requests.get(f"{registry.base_url}/v2/ckit/infra-smoke/tags/list", timeout=10).json()
    assert f"plain-{suffix}" in tags["tags"]


def test_push_to_auth_registry(client: docker.DockerClient, built_image, registry_auth: RegistryInfo) -> None:
    image, _tag, suffix = built_image
    repo = f"{registry_auth.host}/ckit/infra-smoke"
    image.tag(repo, f"auth-{suffix}")
    denied = _push(client, f"{repo}:auth-{suffix}")
    assert [i for i in denied if "error" in i], f"push without creds must report an error item: {denied}"
    items = _push(client, f"{repo}:auth-{suffix}", auth_config=registry_auth.auth_config)
    assert not [i for i in items if "error" in i], items
    url = f"{registry_auth.base_url}/v2/ckit/infra-smoke/tags/list"
    assert requests.get(url, timeout=10).status_code == 401
    creds = (registry_auth.username, registry_auth.password)
    assert f"auth-{suffix}" in requests.get(url, auth=creds, timeout=10).json()["tags"]


def test_tls_registry_verifies_with_the_test_ca(registry_tls: RegistryInfo) -> None:
    assert registry_tls.ca_file is not None and registry_tls.ca_file.is_file()
    resp = requests.get(f"https://{registry_tls.host}/v2/", verify=str(registry_tls.ca_file), timeout=10)
    assert resp.status_code == 200
    assert requests.get(
        f"https://localhost:{registry_tls.host.split(':')[1]}/v2/",
        verify=str(registry_tls.ca_file),
        timeout=10,
    ).ok
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"https://{registry_tls.host}/v2/", timeout=10)


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["shellcheck", "--version"], "ShellCheck"),
        (["siftool", "--help"], "siftool"),
        (["mksquashfs", "-version"], "mksquashfs version"),
        (["tar2sqfs", "--version"], "tar2sqfs"),
        (["unsquashfs", "-version"], "unsquashfs version"),
        (["skopeo", "--version"], "skopeo version"),
        (["umoci", "--version"], "umoci version"),
    ],
)
def test_tools_are_installed(argv: list[str], expect: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    assert expect in proc.stdout + proc.stderr, (proc.returncode, proc.stdout, proc.stderr)


def test_slurm_runs_a_two_task_job(slurm, tmp_path) -> None:
    assert slurm.partition == "debug"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\nsrun bash -c 'echo \"task SLURM_PROCID=$SLURM_PROCID of $SLURM_NTASKS\"'\n"
    )
    out = tmp_path / "job.out"
    proc = subprocess.run(  # noqa: S603
        ["sbatch", "--wait", "--ntasks=2", f"--partition={slurm.partition}", f"--chdir={tmp_path}", f"--output={out}", str(script)],
        capture_output=True, text=True, env={**os.environ, **slurm.env}, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = sorted(out.read_text().splitlines())
    assert lines == ["task SLURM_PROCID=0 of 2", "task SLURM_PROCID=1 of 2"]


def test_slurm_wait_returns_the_job_exit_code(slurm, tmp_path) -> None:
    proc = subprocess.run(  # noqa: S603
        ["sbatch", "--wait", "--partition=batch", f"--chdir={tmp_path}", "--wrap", "exit 3"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr


def test_podman_cli_verifies_the_tls_registry_with_the_cert_dir(
    podman, busybox_image: str, registry_tls: RegistryInfo
) -> None:
    ref = f"{registry_tls.host}/ckit/busybox:tls"
    subprocess.run(["podman", "tag", busybox_image, ref], check=True)  # noqa: S603, S607
    untrusted = subprocess.run(  # noqa: S603, S607
        ["podman", "push", "--tls-verify=true", ref], capture_output=True, text=True, check=False
    )
    assert untrusted.returncode != 0 and "certificate" in untrusted.stderr, untrusted.stderr
    trusted = subprocess.run(  # noqa: S603, S607
        ["podman", "push", "--tls-verify=true", f"--cert-dir={registry_tls.cert_dir}", ref],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert trusted.returncode == 0, trusted.stderr
    tags = requests.get(
        f"{registry_tls.base_url}/v2/ckit/busybox/tags/list", verify=str(registry_tls.ca_file), timeout=10
    )
    assert "tls" in tags.json()["tags"]


def test_debian_image_runs_bash(client: docker.DockerClient, debian_image: str) -> None:
    assert debian_image == "localhost/debian:bookworm"
    code, out = run_container(
        client, debian_image, ["bash", "-c", "cat /etc/debian_version; command -v apt-get"]
    )
    assert code == 0, out
    version, apt = out.decode().split()
    assert version.startswith("12.") and apt == "/usr/bin/apt-get"


def test_busybox_image_has_the_applets(client: docker.DockerClient, busybox_image: str) -> None:
    code, out = run_container(
        client, busybox_image, ["sh", "-c", "id -un; readlink /bin/ls; ulimit -n; exit 7"]
    )
    assert (code, out.decode().split()) == (7, ["root", "busybox", "4096"])
    assert client.images.get(busybox_image).attrs["Config"]["Cmd"] == ["/bin/sh"]
