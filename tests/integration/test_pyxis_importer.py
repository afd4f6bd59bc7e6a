"""ckit as Pyxis's importer, called exactly as Pyxis calls it (argv, environment, stdout, release twice), against a
registry with token auth and a private repository; the served files checked with unsquashfs (what enroot create
runs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.pyxis_helpers import (
    USERS,
    AclRegistry,
    AclTokenServer,
    importer,
    pyxis_env,
    spawn,
    unsquash_check,
)
from tests.integration.registry_helpers import ckit, unique_repo

NOBODY = 65534


@dataclass(frozen=True)
class Acl:
    server: AclTokenServer
    registry: AclRegistry

    @property
    def host(self) -> str:
        return self.registry.host


def push_busybox(host: str, repo: str, image: str, user: str = "alice") -> str:
    """Copy the busybox test image to ``host/repo`` as ``user`` (skopeo, token auth); return ``repo:1``."""
    ref = f"{host}/{repo}:1"
    done = subprocess.run(["skopeo", "copy", "-q", "--dest-tls-verify=false", f"--dest-creds={user}:{USERS[user]}",  # noqa: S607
                           f"containers-storage:{image}", f"docker://{ref}"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return f"{repo}:1"


@pytest.fixture(scope="module")
def acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Acl]:
    server = AclTokenServer(tmp_path_factory.mktemp("acl-token")).start()
    registry = AclRegistry(server, "pyxis")
    registry.start()
    try:
        yield Acl(server, registry)
    finally:
        registry.remove()
        server.stop()


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A folder every user may use (the cluster file system): 0777, outside pytest's private tmp."""
    base = Path(tempfile.mkdtemp(prefix="ckit-pyxis-"))
    base.chmod(0o777)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def fresh(shared: Path, name: str) -> Path:
    """A cluster cache as the admin guide makes it: every user may write it, sticky."""
    folder = shared / name
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


def tree(cache: Path, uid: int = 0) -> Path:
    """The user's own tree of the cache (this test runs as root)."""
    return cache / f"u{uid}"


def home(shared: Path, name: str) -> Path:
    folder = shared / f"home-{name}"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o777)
    return folder


@pytest.fixture(scope="module")
def private(acl: Acl, busybox_image: str) -> str:
    return push_busybox(acl.host, unique_repo("private"), busybox_image)


def rootfs(path: Path, dest: Path) -> Path:
    """Unpack the file as ``enroot create`` does (``unsquashfs -user-xattrs -d``)."""
    done = subprocess.run(["unsquashfs", "-user-xattrs", "-d", str(dest), str(path)],  # noqa: S607
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return dest


def test_get_prints_only_the_path_and_release_twice_is_harmless(acl: Acl, private: str, shared: Path,
                                                                 tmp_path: Path) -> None:
    cache = fresh(shared, "contract")
    env = pyxis_env(home(shared, "alice"), cache, user="alice", job=11, step=0)
    uri = f"docker://{acl.host}#{private}"
    got = importer("get", uri, env=env)
    assert got.returncode == 0, got.stderr
    assert got.stdout.count("\n") == 1 and got.stdout.endswith("\n")  # the path and nothing else
    path = Path(got.stdout.strip())
    assert path.is_absolute() and path.parent == tree(cache) / "artifacts"
    assert path.stat().st_mode & 0o777 == 0o600  # fetched with alice's credentials: hers alone
    assert "squashfs-root/bin/busybox" in unsquash_check(path)
    unpacked = rootfs(path, tmp_path / "rootfs")
    digest = json.loads(next((tree(cache) / "private" / "refs" / "tags").glob("*.json")).read_text())["digest"]  # pulled with credentials: a private record
    repo = private.split(":")[0]
    assert (unpacked / "etc" / "rc").read_text().splitlines()[0] == \
        f"# enroot-provenance: docker://{acl.host}#{repo}:{digest}"
    assert (unpacked / "bin" / "sh").is_symlink() or (unpacked / "bin" / "sh").is_file()
    held = list((tree(cache) / "holds").glob("*/11.0@*"))
    assert len(held) == 1
    for _ in range(2):  # after the container is created, and again at task cleanup
        released = importer("release", env=env)
        assert (released.returncode, released.stdout) == (0, "")
    assert not held[0].exists()
    for other in (f"docker://{acl.host}#{repo}@{digest}", f"docker://{acl.host}/{private}",
                  f"docker://alice@{acl.host}#{private}"):
        again = importer("get", other, env=env)
        assert (again.returncode, again.stdout.strip()) == (0, str(path)), again.stderr
        assert "converting" not in again.stderr
    via_cli = ckit("pyxis-importer", "get", uri, env=env)
    assert (via_cli.returncode, via_cli.stdout) == (0, f"{path}\n"), via_cli.stderr


def test_users_without_access_get_the_registrys_refusal(acl: Acl, private: str, shared: Path,
                                                       busybox_image: str) -> None:
    cache = fresh(shared, "access")
    uri = f"docker://{acl.host}#{private}"
    assert importer("get", uri, env=pyxis_env(home(shared, "alice"), cache, user="alice")).returncode == 0
    bob = importer("get", uri, env=pyxis_env(home(shared, "bob"), cache, user="bob", job=12))
    assert (bob.returncode, bob.stdout) == (1, "")
    assert f"registry {acl.host} rejected the access token" in bob.stderr and "lacks the scope" in bob.stderr
    anonymous = importer("get", uri, env=pyxis_env(home(shared, "anon"), cache, job=13))
    assert (anonymous.returncode, anonymous.stdout) == (1, "")
    assert f"registry {acl.host} requires authentication" in anonymous.stderr
    assert not list((tree(cache) / "holds").glob("*/12.0@*")) and not list((tree(cache) / "holds").glob("*/13.0@*"))
    public = push_busybox(acl.host, unique_repo("public"), busybox_image)
    served = importer("get", f"docker://{acl.host}#{public}", env=pyxis_env(home(shared, "anon"), cache, job=14))
    assert served.returncode == 0, served.stderr  # a public image needs no credentials
    unsquash_check(Path(served.stdout.strip()))


def test_a_private_image_is_its_converters_alone_and_a_public_one_is_shared(acl: Acl, private: str, shared: Path,
                                                                           busybox_image: str) -> None:
    """carol (another Unix user: uid 65534 here) with her own credentials cannot read the private image alice (root
    here) converted: she converts her own copy into her own tree. A public image root converted is served to her as
    it is (root's tree is trusted by every reader)."""
    cache = fresh(shared, "multiuser")
    uri = f"docker://{acl.host}#{private}"
    first = importer("get", uri, env=pyxis_env(home(shared, "alice"), cache, user="alice"))
    assert first.returncode == 0, first.stderr
    assert Path(first.stdout.strip()).stat().st_mode & 0o777 == 0o600  # fetched with credentials: private
    carol_env = pyxis_env(home(shared, "carol"), cache, user="carol", job=21)
    carol = importer("get", uri, env=carol_env, as_uid=NOBODY)
    assert carol.returncode == 0 and "converting" in carol.stderr, carol.stderr
    assert Path(carol.stdout.strip()).parent == tree(cache, NOBODY) / "artifacts"
    readable = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",  # noqa: S607
                               "unsquashfs", "-s", first.stdout.strip()], capture_output=True, text=True, check=False)
    assert readable.returncode != 0  # alice's private copy stays hers
    assert importer("release", env=carol_env, as_uid=NOBODY).returncode == 0
    assert not list((tree(cache, NOBODY) / "holds").glob("*/21.0@*"))
    public = f"docker://{acl.host}#{push_busybox(acl.host, unique_repo('public'), busybox_image)}"
    by_root = importer("get", public, env=pyxis_env(home(shared, "anon"), cache, job=22))
    assert by_root.returncode == 0 and Path(by_root.stdout.strip()).stat().st_mode & 0o777 == 0o644
    by_carol = importer("get", public, env=pyxis_env(home(shared, "carol"), cache, job=23), as_uid=NOBODY)
    assert (by_carol.returncode, by_carol.stdout) == (0, by_root.stdout), by_carol.stderr
    assert "converting" not in by_carol.stderr


def test_32_concurrent_gets_make_one_conversion(acl: Acl, shared: Path, busybox_image: str) -> None:
    cache = fresh(shared, "herd")
    ref = push_busybox(acl.host, unique_repo("private"), busybox_image)
    uri = f"docker://{acl.host}#{ref}"

    envs = [pyxis_env(home(shared, "alice"), cache, user="alice", job=300 + n) for n in range(32)]
    with ThreadPoolExecutor(max_workers=32) as pool:  # 32 separate processes, started together
        runs = list(pool.map(lambda env: importer("get", uri, env=env), envs))
    assert [r.returncode for r in runs] == [0] * 32, [r.stderr for r in runs if r.returncode]
    paths = {r.stdout for r in runs}
    assert len(paths) == 1 and all(r.stdout.count("\n") == 1 for r in runs)
    assert sum("converting" in r.stderr for r in runs) == 1
    assert len(list((tree(cache) / "artifacts").glob("*.sqsh"))) == 1
    unsquash_check(Path(paths.pop().strip()))
    assert len(list((tree(cache) / "holds").glob("*/*"))) == 32  # every step holds it until its release


def test_offline_serves_by_digest_and_by_tag_with_a_warning(tmp_path_factory: pytest.TempPathFactory,
                                                           shared: Path, busybox_image: str) -> None:
    server = AclTokenServer(tmp_path_factory.mktemp("offline-token")).start()
    registry = AclRegistry(server, "offline")
    registry.start()
    try:
        ref = push_busybox(registry.host, unique_repo("private"), busybox_image)
        cache = fresh(shared, "offline")
        alice = pyxis_env(home(shared, "alice"), cache, user="alice")
        online = importer("get", f"docker://{registry.host}#{ref}", env=alice)
        assert online.returncode == 0, online.stderr
    finally:
        registry.remove()
        server.stop()
    digest = json.loads(next((tree(cache) / "private" / "refs" / "tags").glob("*.json")).read_text())["digest"]  # pulled with credentials: a private record
    by_tag = importer("get", f"docker://{registry.host}#{ref}", env=alice)
    assert (by_tag.returncode, by_tag.stdout) == (0, online.stdout), by_tag.stderr
    assert f"serving {registry.host}/{ref} as {digest}" in by_tag.stderr and "warning:" in by_tag.stderr
    repo = ref.split(":")[0]
    by_digest = importer("get", f"docker://{registry.host}#{repo}@{digest}", env=alice)
    assert (by_digest.returncode, by_digest.stdout) == (0, online.stdout) and "warning" not in by_digest.stderr
    carol = importer("get", f"docker://{registry.host}#{ref}", env=pyxis_env(home(shared, "carol"), cache,
                                                                             user="carol"), as_uid=NOBODY)
    assert (carol.returncode, carol.stdout) == (1, "")  # never accepted by the registry: no file offline
    assert "has never been cached here" in carol.stderr  # alice's records of a private image are hers alone
    unknown = importer("get", f"docker://{registry.host}#{repo}:2", env=alice)
    assert unknown.returncode == 1 and "has never been cached here" in unknown.stderr
    assert "cannot reach registry" in unknown.stderr


@pytest.mark.parametrize("uri", ["dockerd://ubuntu:24.04", "podman://localhost/busybox:1.36"])
def test_engine_uris_are_refused_with_the_admins_options(uri: str, shared: Path) -> None:
    got = importer("get", uri, env=pyxis_env(home(shared, "alice"), shared / "unused"))
    assert (got.returncode, got.stdout) == (2, "")
    assert "cannot share" in got.stderr and "importer= from plugstack.conf" in got.stderr


def test_usage_and_missing_configuration(shared: Path) -> None:
    env = pyxis_env(home(shared, "alice"), shared / "x")
    assert importer("frobnicate", env=env).returncode == 2
    env["CKIT_IMPORTER_CONFIG"] = str(shared / "absent.yaml")
    got = importer("get", "docker://ubuntu:24.04", env=env)
    assert got.returncode == 2 and "no cluster image cache is configured" in got.stderr
    assert importer("release", env=env).returncode == 0  # release never fails
    assert os.path.exists(shared)


LEAN = """
import sys
from buildkit.importer.pyxis import main
code = main(["get", sys.argv[1]])
heavy = sorted(m for m in ("requests", "urllib3", "typer", "rich", "jsonschema", "buildkit.image.convert")
               if m in sys.modules)
print("heavy:", ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def test_a_cached_get_loads_no_http_library_or_converter(acl: Acl, private: str, shared: Path) -> None:
    """The cached path is what every job step pays: the lean HEAD (http.client), no requests, no CLI, no converter."""
    import sys

    cache = fresh(shared, "lean")
    env = pyxis_env(home(shared, "alice"), cache, user="alice")
    uri = f"docker://{acl.host}#{private}"
    assert importer("get", uri, env=env).returncode == 0
    lean = subprocess.run([sys.executable, "-c", LEAN, uri], env=env, capture_output=True, text=True, check=False)  # noqa: S603
    assert lean.returncode == 0, lean.stderr
    assert "heavy: \n" in lean.stderr, lean.stderr
    refused = subprocess.run([sys.executable, "-c", LEAN, uri], capture_output=True, text=True, check=False,  # noqa: S603
                             env=pyxis_env(home(shared, "bob"), cache, user="bob"))
    assert refused.returncode == 1 and "heavy: requests" in refused.stderr  # a refusal is worded by the full client


WAITER = """
import sys
from buildkit.importer.pyxis import main
code = main(["get", sys.argv[1]])
print("loaded:", ",".join(sorted(m for m in sys.modules if m.startswith("buildkit") or m in (
    "yaml", "http.client", "json", "ssl", "hashlib", "typing"))), file=sys.stderr)
sys.exit(code)
"""


def test_a_waiter_takes_what_its_peer_served_loading_only_the_standard_library(acl: Acl, private: str,
                                                                                shared: Path) -> None:
    """A get that finds a live get of the same user with the same settings on its node waits for it and serves
    its answer, held under its own step, without the configuration, registry or cache machinery."""
    import sys

    from buildkit.importer import peers
    from buildkit.importer import pyxis as importer_mod

    cache = fresh(shared, "peer")
    uri = f"docker://{acl.host}#{private}"
    first, second = (pyxis_env(home(shared, "alice"), cache, user="alice", job=job) for job in (510, 511))
    marker = peers.claim(uri, first)  # this test is the first get
    assert isinstance(marker, peers.Marker)
    try:
        waiter = subprocess.Popen([sys.executable, "-c", WAITER, uri], env=second, text=True,  # noqa: S603
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while os.getpriority(os.PRIO_PROCESS, waiter.pid) != 19 and time.monotonic() < deadline:
            time.sleep(0.02)  # until it found the marker and stepped aside
        served, root = importer_mod.get(uri, first)
        assert root == str(tree(cache))
        peers.publish(marker, root, served.key, str(served.path))
    finally:
        peers.drop(marker)
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert out == f"{served.path}\n"
    loaded = err.split("loaded: ")[1].split()[0].split(",")
    assert set(loaded) <= {"buildkit", "buildkit.importer", "buildkit.importer.pyxis", "buildkit.importer.peers",
                           "buildkit.fs", "buildkit.procstat", "buildkit.storage", "buildkit.storage.holds",
                           "buildkit.storage.safefs", "buildkit.errors", "buildkit.outside"}, loaded
    assert sorted(p.name for p in (tree(cache) / "holds" / served.key).iterdir()) == sorted(
        importer_mod.holder_id(env) for env in (first, second))  # each step holds it under its own name
    assert importer("release", env=second).returncode == 0
    assert [p.name for p in (tree(cache) / "holds" / served.key).iterdir()] == [importer_mod.holder_id(first)]


def test_a_get_whose_peer_serves_nothing_takes_the_ordinary_path(acl: Acl, private: str, shared: Path) -> None:
    from buildkit.importer import peers

    cache = fresh(shared, "peer-failed")
    uri = f"docker://{acl.host}#{private}"
    first, second = (pyxis_env(home(shared, "alice"), cache, user="alice", job=job) for job in (520, 521))
    marker = peers.claim(uri, first)
    try:
        waiter = spawn("get", uri, env=second)
        time.sleep(0.5)
    finally:
        peers.drop(marker)  # the first get failed: no answer to take
    out, err = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, err
    assert "converting" in err and out.strip().startswith(str(cache))  # its own access check and conversion
