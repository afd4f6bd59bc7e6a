"""`ckit push STACK REF` pushes the stack's newest build from the engine, annotated with its recipe."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from buildkit.cli import main


def _ckit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_push_stack_pushes_its_newest_build(podman: Any, debian_image: str, registry: Any,
                                            capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "cache"))
    code, out, err = _ckit(capsys, "build", "demo", "--to", "image,sif", "-o", str(tmp_path / "out"), "--json")
    assert code == 0, err
    built = json.loads(out)
    code, out, err = _ckit(capsys, "push", "demo", f"{registry.host}/ckit/stack-push:1", "--json")
    assert code == 0, err
    pushed = json.loads(out)
    assert pushed["kind"] == "image" and pushed["source"] == "demo"
    assert pushed["media_type"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert pushed["uploaded_bytes"] >= 0 and pushed["size"] > 0  # ckit's client pushed it, not the engine
    accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
    reply = requests.get(f"http://{registry.host}/v2/ckit/stack-push/manifests/1", headers={"Accept": accept},
                         timeout=30)
    reply.raise_for_status()
    config_digest = reply.json()["config"]["digest"]
    config = requests.get(f"http://{registry.host}/v2/ckit/stack-push/blobs/{config_digest}", timeout=30).json()
    labels = config["config"]["Labels"]
    assert labels["io.ckit.stack"] == "demo"
    assert labels["io.ckit.fingerprint"] == built["fingerprint"]

    # the .sif of the same build carries those labels in its oci-config.json: its manifest gets them
    sif = next(a["path"] for a in built["artifacts"] if a["kind"] == "sif")
    code, out, err = _ckit(capsys, "push", sif, f"{registry.host}/ckit/stack-push:1-sif", "--json")
    assert code == 0, err
    annotations = json.loads(out)["annotations"]
    assert annotations["io.ckit.stack"] == "demo"
    assert json.loads(annotations["io.ckit.parameters"]) == json.loads(labels["io.ckit.parameters"])


def test_push_stack_without_a_build(podman: Any, registry: Any, capsys: pytest.CaptureFixture[str],
                                    tmp_path, monkeypatch) -> None:
    stacks = tmp_path / "recipes" / "stacks"
    stacks.mkdir(parents=True)
    (stacks / "never-built.yaml").write_text("kind: stack\ndescription: never built\nbase: debian\n")
    code, _, err = _ckit(capsys, "--recipes", str(tmp_path / "recipes"), "push", "never-built",
                         f"{registry.host}/ckit/none:1")
    assert code == 2
    assert "stack never-built has no build in the engine" in err and " build never-built` first" in err
