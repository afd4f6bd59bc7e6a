"""`ckit lock`: the stack's base image tag resolved to the digest a registry serves, written to ckit.lock."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import docker

from tests.integration.registry_helpers import ckit


def test_lock_pins_the_base_image_digest_podman_pushed(registry, podman, busybox_image, tmp_path: Path,
                                                      podman_tags) -> None:
    namespace = f"ckit-lock/{uuid.uuid4().hex[:8]}"
    release = "pinned"
    engine = docker.from_env()
    engine.images.get(busybox_image).tag(f"{registry.host}/{namespace}/debian", release)
    podman_tags(f"{registry.host}/{namespace}/debian:{release}")
    items = list(engine.api.push(f"{registry.host}/{namespace}/debian", tag=release, stream=True, decode=True))
    assert not [i for i in items if "error" in i], items
    expected = json.loads(subprocess.run(  # noqa: S603,S607
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{registry.host}/{namespace}/debian:{release}"],
        capture_output=True, text=True, check=True).stdout)["Digest"]

    out = tmp_path / "ckit.lock"
    sets = ["--set", f"debian.registry={registry.host}/{namespace}", "--set", f"debian.release={release}"]
    locked = ckit("lock", "demo", *sets, "-o", str(out))
    assert locked.returncode == 0, locked.stderr
    assert locked.stdout.strip() == str(out)
    data = json.loads(out.read_text())
    assert data["stack"] == "demo"
    assert data["base"]["image"] == f"{registry.host}/{namespace}/debian:{release}"
    assert data["base"]["digest"] == expected
    assert data["base"]["pinned"] == f"{registry.host}/{namespace}/debian:{release}@{expected}"
    assert data["parameters"]["debian"] == {"registry": f"{registry.host}/{namespace}", "release": release}
    first = out.read_bytes()
    assert ckit("lock", "demo", *sets, "-o", str(out)).returncode == 0
    assert out.read_bytes() == first  # deterministic


def test_lock_of_a_missing_base_tag_is_one_clear_message(registry, tmp_path: Path) -> None:
    namespace = f"ckit-lock/{uuid.uuid4().hex[:8]}"
    locked = ckit("lock", "demo", "--set", f"debian.registry={registry.host}/{namespace}", "-o",
                  str(tmp_path / "ckit.lock"))
    assert locked.returncode == 1
    assert locked.stderr.splitlines()[0] == (
        f"ckit: error: manifest {registry.host}/{namespace}/debian:bookworm: not found on {registry.host}")
    assert not (tmp_path / "ckit.lock").exists()
