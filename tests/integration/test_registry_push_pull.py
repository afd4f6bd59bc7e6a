"""`ckit push`/`ckit pull` of .sif and .sqsh artifacts against the real distribution registry."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from buildkit import __version__
from buildkit.registry.distribution.client import RegistryClient
from buildkit.registry.distribution.reference import parse
from buildkit.registry.transfer.artifacts import SIF, SQSH
from tests.integration.registry_helpers import blob_file, ckit, fake_sif, fake_sqsh, unique_repo
from tests.testdata import sif_dir


def test_sif_push_pull_round_trip_with_media_types_and_annotations(registry, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "demo.sif")
    ref = f"{registry.host}/{unique_repo()}:v1"
    pushed = ckit("push", str(sif), ref, "--stack", "pytorch-demo", "--set", "torch.version=2.3",
                  "--source-digest", "sha256:" + "a" * 64, "--json", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert pushed.returncode == 0, pushed.stderr
    out = json.loads(pushed.stdout)
    assert out["kind"] == "sif" and out["size"] == sif.stat().st_size
    assert out["uploaded_bytes"] == sif.stat().st_size + 2  # the layer plus the "{}" config
    assert out["annotations"] == {
        "io.ckit.parameters": '{"torch":{"version":"2.3"}}',
        "io.ckit.source.digest": "sha256:" + "a" * 64,
        "io.ckit.stack": "pytorch-demo",
        "io.ckit.version": __version__,
        "org.opencontainers.image.created": "2023-11-14T22:13:20Z",
    }
    target = parse(ref)
    manifest = RegistryClient.for_reference(target).get_manifest(target.repository, "v1").json()
    assert manifest["config"]["mediaType"] == SIF.config_type
    assert [x["mediaType"] for x in manifest["layers"]] == [SIF.layer_type]
    assert manifest["layers"][0]["annotations"] == {"org.opencontainers.image.title": "demo.sif"}
    assert manifest["annotations"] == out["annotations"]

    pulled = ckit("pull", ref, "-o", str(tmp_path / "out"), "--json")
    assert pulled.returncode == 0, pulled.stderr
    data = json.loads(pulled.stdout)
    assert Path(data["path"]) == tmp_path / "out" / "demo.sif"
    assert (tmp_path / "out" / "demo.sif").read_bytes() == sif.read_bytes()
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "out" / "demo.sif").stat().st_mode & 0o777 == 0o755 & ~mask  # runnable, as apptainer pulls it
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["demo.sif"]

    by_digest = ckit("pull", out["reference"], "-o", str(tmp_path / "pinned"))  # REPO:TAG@sha256:…
    assert by_digest.returncode == 0, by_digest.stderr
    assert (tmp_path / "pinned" / "demo.sif").read_bytes() == sif.read_bytes()


def test_sqsh_round_trip_uses_the_ckit_media_type(registry, tmp_path: Path) -> None:
    sqsh = fake_sqsh(tmp_path / "app.sqsh")
    ref = f"{registry.host}/{unique_repo()}:sqsh"
    assert ckit("push", str(sqsh), ref).returncode == 0
    target = parse(ref)
    manifest = RegistryClient.for_reference(target).get_manifest(target.repository, "sqsh").json()
    assert manifest["config"]["mediaType"] == "application/vnd.ckit.enroot.config.v1+json"
    assert manifest["layers"][0]["mediaType"] == SQSH.layer_type == "application/vnd.ckit.enroot.squashfs.v1"
    pulled = ckit("pull", ref, "-o", str(tmp_path / "o"))
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.strip() == str(tmp_path / "o" / "app.sqsh")
    assert (tmp_path / "o" / "app.sqsh").read_bytes() == sqsh.read_bytes()
    assert (tmp_path / "o" / "app.sqsh").stat().st_mode & 0o111 == 0  # data, not a program


def test_repush_of_an_unchanged_artifact_uploads_zero_bytes(registry, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "same.sif")
    ref = f"{registry.host}/{unique_repo()}:v1"
    first = json.loads(ckit("push", str(sif), ref, "--json").stdout)
    second = json.loads(ckit("push", str(sif), ref, "--json").stdout)
    assert first["uploaded_bytes"] > 0
    assert second["uploaded_bytes"] == 0
    assert second["digest"] == first["digest"] or second["annotations"] != first["annotations"]


def test_a_pulled_file_is_not_sent_back_to_the_registry_it_came_from(registry, tmp_path: Path) -> None:
    """ckit remembers the digest it verified on pull, so it can ask the registry before sending the file."""
    sif = fake_sif(tmp_path / "up.sif")
    repo = f"{registry.host}/{unique_repo()}"
    assert json.loads(ckit("push", str(sif), f"{repo}:a", "--json").stdout)["uploaded_bytes"] > sif.stat().st_size
    pulled = ckit("pull", f"{repo}:a", "-o", str(tmp_path / "down"))
    assert pulled.returncode == 0, pulled.stderr
    again = json.loads(ckit("push", pulled.stdout.strip(), f"{repo}:b", "--json").stdout)
    assert again["uploaded_bytes"] == 0


def test_chunked_upload_sends_every_byte_once(registry, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "big.sif", payload_size=5 * 1024 * 1024 + 17)
    ref = parse(f"{registry.host}/{unique_repo()}:chunked")
    client = RegistryClient.for_reference(ref)
    client.chunk_size = 1 << 20
    from buildkit.registry.transfer.artifacts import pull_artifact, push_artifact

    result = push_artifact(client, ref, sif, {})
    assert result.uploaded_bytes == sif.stat().st_size + 2
    pulled = pull_artifact(client, ref, tmp_path / "back")
    assert pulled.path.read_bytes() == sif.read_bytes()


def test_broken_chunk_resumes_and_the_blob_is_intact(registry, tmp_path: Path) -> None:
    """The connection drops in the middle of the second chunk; the upload goes on from the registry's range."""
    from buildkit.registry.distribution import chunked
    from buildkit.registry.transfer.artifacts import pull_artifact, push_artifact

    sif = fake_sif(tmp_path / "resume.sif", payload_size=3 * 1024 * 1024)
    ref = parse(f"{registry.host}/{unique_repo()}:resume")
    client = RegistryClient.for_reference(ref)
    client.chunk_size = 1 << 20
    original = chunked.ChunkedUpload._body
    calls = {"n": 0}

    def flaky_body(self, offset, length):  # type: ignore[no-untyped-def]
        make = original(self, offset, length)

        def body():  # type: ignore[no-untyped-def]
            calls["n"] += 1
            reader = make()
            if calls["n"] == 2:
                reader.read = _failing_after(reader.read, 100_000)  # type: ignore[method-assign]
            return reader
        return body

    chunked.ChunkedUpload._body = flaky_body  # type: ignore[method-assign]
    try:
        result = push_artifact(client, ref, sif, {})
    finally:
        chunked.ChunkedUpload._body = original  # type: ignore[method-assign]
    assert calls["n"] >= 5  # 4 chunks + at least one retry
    assert result.uploaded_bytes >= sif.stat().st_size
    assert pull_artifact(client, ref, tmp_path / "back").path.read_bytes() == sif.read_bytes()


def _failing_after(read, limit):  # type: ignore[no-untyped-def]
    sent = {"n": 0}

    def fail(amt=-1):  # type: ignore[no-untyped-def]
        if sent["n"] >= limit:
            raise OSError("connection dropped (test)")
        data = read(amt)
        sent["n"] += len(data)
        return data
    return fail


def test_blob_altered_on_registry_disk_fails_with_exit_4_and_leaves_nothing(registry, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "victim.sif")
    ref = f"{registry.host}/{unique_repo()}:v1"
    assert ckit("push", str(sif), ref).returncode == 0
    target = parse(ref)
    layer = RegistryClient.for_reference(target).get_manifest(target.repository, "v1").json()["layers"][0]
    stored = blob_file(registry.data_dir, layer["digest"])
    assert stored.is_file(), stored
    original = stored.read_bytes()
    try:
        altered = bytearray(original)
        altered[-1] ^= 0xFF
        stored.write_bytes(bytes(altered))
        out = tmp_path / "out"
        pulled = ckit("pull", ref, "-o", str(out))
        assert pulled.returncode == 4, pulled.stderr
        assert f"blob {layer['digest']}" in pulled.stderr and "does not match its digest" in pulled.stderr
        assert not out.exists() or list(out.iterdir()) == []
    finally:
        stored.write_bytes(original)


def test_missing_tag_is_one_clear_message(registry, tmp_path: Path) -> None:
    ref = f"{registry.host}/{unique_repo()}:nope"
    pulled = ckit("pull", ref, "-o", str(tmp_path))
    assert pulled.returncode == 1
    repo = ref.split("/", 1)[1].rsplit(":", 1)[0]
    assert pulled.stderr.splitlines()[0] == (
        f"ckit: error: manifest {registry.host}/{repo}:nope: not found on {registry.host} "
        "(MANIFEST_UNKNOWN: manifest unknown)")


def test_unreachable_registry_is_one_clear_message(tmp_path: Path) -> None:
    pulled = ckit("pull", "127.0.0.1:5999/team/app:v1", "-o", str(tmp_path))
    assert pulled.returncode == 1
    assert pulled.stderr.splitlines() == [
        "ckit: error: cannot reach registry 127.0.0.1:5999 (https://127.0.0.1:5999/v2/): connection refused",
        "  hint: check the registry address and port, and that it is running",
    ]


def test_pushing_something_that_is_no_artifact_is_bad_input(registry, tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    pushed = ckit("push", str(junk), f"{registry.host}/{unique_repo()}:v1")
    assert pushed.returncode == 2
    assert "neither a SIF image nor a squashfs (.sqsh) file" in pushed.stderr


def test_stage_pulls_into_the_dest_folder_and_copies_local_files(registry, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "job.sif")
    ref = f"{registry.host}/{unique_repo()}:v1"
    assert ckit("push", str(sif), ref).returncode == 0
    staged = ckit("stage", ref, "--dest", str(tmp_path / "shared"), "--json")
    assert staged.returncode == 0, staged.stderr
    data = json.loads(staged.stdout)
    path = Path(data["path"])  # in the folder's cache layout, found by `ckit launch` through its index
    assert path.parent == tmp_path / "shared" / f"u{os.geteuid()}" / "artifacts" and path.suffix == ".sif"
    assert path.read_bytes() == sif.read_bytes() and data["kind"] == "image" and data["target"] == "sif"
    local = ckit("stage", str(sif), "--dest", str(tmp_path / "shared2"))
    assert local.returncode == 0, local.stderr
    files = tmp_path / "shared2" / f"u{os.geteuid()}" / "files"  # the stager's own tree
    assert local.stdout.strip() == str(files / "job.sif")
    assert (files / "job.sif").read_bytes() == sif.read_bytes()


def test_stage_to_a_sites_shared_image_folder(registry, tmp_path: Path, monkeypatch) -> None:
    """A user site profile (a copy of the built-in `local` one) whose shared_image_dir uses $USER."""
    import yaml

    builtin = Path(__file__).resolve().parents[2] / "sites" / "local.yaml"
    profile = yaml.safe_load(builtin.read_text())
    profile["name"] = "stagetest"
    profile["shared_image_dir"] = str(tmp_path / "shared" / "$USER")
    profile["runtimes"] = [{"kind": "apptainer"}]  # a site that runs .sif files (local's first is charliecloud: .sqsh)
    sites_dir = tmp_path / "sites"
    sites_dir.mkdir()
    (sites_dir / "stagetest.yaml").write_text(yaml.safe_dump(profile))
    sif = tmp_path / "site.sif"  # a real SIF: stage checks that the site's apptainer reads its squashfs
    sif.write_bytes((sif_dir() / "busybox_amd64.sif").read_bytes())
    ref = f"{registry.host}/{unique_repo()}:v1"
    assert ckit("push", str(sif), ref).returncode == 0
    staged = ckit("--sites", str(sites_dir), "stage", ref, "--site", "stagetest", env={"USER": "alice"})
    assert staged.returncode == 0, staged.stderr
    path = Path(staged.stdout.strip())
    assert path.parent == tmp_path / "shared" / "alice" / f"u{os.geteuid()}" / "artifacts"
    assert path.read_bytes() == sif.read_bytes()


def test_cross_repository_mount_sends_no_bytes(registry, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "mount.sif")
    source, target = unique_repo(), unique_repo()
    client = RegistryClient(registry.host)
    with sif.open("rb") as f:
        digest, size = "sha256:" + hashlib.file_digest(f, "sha256").hexdigest(), sif.stat().st_size
    assert client.upload_blob(source, sif, digest, size) == size
    assert not client.blob_exists(target, digest)
    assert client.upload_blob(target, sif, digest, size, mount_from=source) == 0
    assert client.blob_exists(target, digest)
    with client.open_blob(target, digest, size) as blob:
        assert blob.read() == sif.read_bytes()


def test_upload_the_registry_forgot_restarts_from_zero(registry, tmp_path: Path) -> None:
    """The upload session is cancelled on the registry after the first chunk: ckit starts a new one cleanly."""
    import requests

    from buildkit.registry.distribution import chunked
    from buildkit.registry.transfer.artifacts import pull_artifact, push_artifact

    sif = fake_sif(tmp_path / "restart.sif", payload_size=2 * 1024 * 1024)
    ref = parse(f"{registry.host}/{unique_repo()}:restart")
    client = RegistryClient.for_reference(ref)
    client.chunk_size = 1 << 20
    original = chunked.ChunkedUpload._send_chunk
    state = {"calls": 0, "cancelled": None}

    def cancelling(self, offset, end):  # type: ignore[no-untyped-def]
        state["calls"] += 1
        if state["calls"] == 2:
            state["cancelled"] = requests.delete(self.location, timeout=10).status_code
        return original(self, offset, end)

    chunked.ChunkedUpload._send_chunk = cancelling  # type: ignore[method-assign]
    try:
        result = push_artifact(client, ref, sif, {})
    finally:
        chunked.ChunkedUpload._send_chunk = original  # type: ignore[method-assign]
    assert state["cancelled"] == 204
    # sent: chunk 1, the refused chunk 2, then the whole blob again (+ the 2-byte config)
    assert result.uploaded_bytes == sif.stat().st_size + (2 << 20) + 2
    assert pull_artifact(client, ref, tmp_path / "back").path.read_bytes() == sif.read_bytes()


def _tty(command: list[str], env: dict[str, str]) -> str:
    """What ``command`` writes to a terminal (run under ``script``), colour codes removed."""
    import os
    import re
    import shlex
    import subprocess

    done = subprocess.run(["script", "-qec", shlex.join(command), "/dev/null"],  # noqa: S603,S607
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, **env, "COLUMNS": "160"})
    assert done.returncode == 0, done.stdout + done.stderr
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", done.stdout).replace("\r", "\n")


def test_pull_on_a_terminal_shows_size_and_digest(registry, podman, busybox_image, tmp_path: Path,
                                                   podman_tags) -> None:
    """No bar without its size (it stayed at '0/? bytes': that the meter is told the size is
    test_first_hour.py::test_a_pull_tells_its_meter_the_size; a local pull is too quick to draw one); a converted
    image's summary names the manifest digest it pulled (it said 'None')."""
    import docker

    from tests.integration.registry_helpers import CKIT

    env = {"CKIT_CACHE_DIR": str(tmp_path / "cache")}
    sif = fake_sif(tmp_path / "tty.sif", payload_size=6 << 20)
    ref = f"{registry.host}/{unique_repo()}:tty"
    assert ckit("push", str(sif), ref).returncode == 0
    shown = _tty([CKIT, "pull", ref, "-o", str(tmp_path / "a")], env)
    assert "/? bytes" not in shown and "None" not in shown, shown
    layer = json.loads(ckit("pull", ref, "-o", str(tmp_path / "b"), "--json").stdout)["digest"]
    assert f"bytes, sif {layer})" in shown

    repo = unique_repo()
    engine = docker.from_env()
    engine.images.get(busybox_image).tag(f"{registry.host}/{repo}", "img")
    podman_tags(f"{registry.host}/{repo}:img")
    items = list(engine.api.push(f"{registry.host}/{repo}", tag="img", stream=True, decode=True))
    assert not [i for i in items if "error" in i], items
    target = parse(f"{registry.host}/{repo}:img")
    digest = RegistryClient.for_reference(target).get_manifest(target.repository, "img").digest
    shown = _tty([CKIT, "pull", str(target), "--to", "sqsh", "-o", str(tmp_path / "c")], env)
    assert f"pull {repo}" not in shown and "None" not in shown, shown  # the conversion shows its own progress
    assert f"pulled {target}@{digest} (" in shown and f"bytes, sqsh {digest})" in shown


def test_a_sif_pushed_by_older_singularity_is_pulled(registry, tmp_path: Path) -> None:
    """Singularity < 3.7 pushed the SIF layer as 'appliciation/vnd.sylabs.sif.layer.tar' (sic) and its config as
    '…sif.config.v1' (no +json); apptainer still pulls those (it checks the layer type only), and so does ckit."""
    import io

    from buildkit.oci.digest import of_bytes
    from buildkit.registry.transfer.artifacts import SIF_LAYER_PROTO, canonical_json

    sif = fake_sif(tmp_path / "old.sif")
    ref = parse(f"{registry.host}/{unique_repo()}:old")
    client = RegistryClient.for_reference(ref)
    data = sif.read_bytes()
    client.upload_blob(ref.repository, io.BytesIO(data), of_bytes(data), len(data))
    client.upload_blob(ref.repository, io.BytesIO(b"{}"), of_bytes(b"{}"), 2)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.sylabs.sif.config.v1", "digest": of_bytes(b"{}"), "size": 2},
                "layers": [{"mediaType": SIF_LAYER_PROTO, "digest": of_bytes(data), "size": len(data),
                            "annotations": {"org.opencontainers.image.title": "old.sif"}}]}
    client.put_manifest(ref.repository, "old", canonical_json(manifest), "application/vnd.oci.image.manifest.v1+json")
    pulled = ckit("pull", str(ref), "-o", str(tmp_path / "out"), "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["kind"] == "sif"
    assert (tmp_path / "out" / "old.sif").read_bytes() == data
