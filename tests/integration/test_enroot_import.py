"""The real enroot 4.1.2 imports what ``ckit push`` pushed (its default format: Docker schema 2, which enroot's
registry probe accepts), and the tree it makes is the tree of ckit's .sqsh of the same image: names, types,
modes, owners, sizes and link targets (``unsquashfs -lln``), except what ckit documents adding (Charliecloud's
/ch files and /mnt/0…9). enroot's four files are byte-identical but for /etc/rc's provenance line, which enroot
writes from its next release on (``# enroot-provenance: URI`` first, then the labels' comments and an empty line;
4.1.2 writes the empty line only after labels): ckit's /etc/rc is what that enroot writes, for the reference by
tag and by digest.
"""

from __future__ import annotations

import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildkit.image.rootfs import charliecloud as charliecloud_rootfs
from tests.infra import pyxis
from tests.integration.pyxis_jobs import WorkImage, work_image
from tests.integration.registry_helpers import ckit

# what ckit adds for Charliecloud (README, buildkit/image/charliecloud_rootfs.py): its files, and the mount points
# ch-run binds, each only where the image has nothing
CKIT_FILES = {"/ch", "/ch/environment", "/ch/metadata.json"}
CKIT_MOUNTS = {*charliecloud_rootfs.MOUNT_DIRS, *charliecloud_rootfs.MOUNT_FILES}
ENROOT_FILES = ("etc/rc", "etc/rc.local", "etc/environment", "etc/fstab")
DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"


@dataclass(frozen=True)
class Pushed:
    host: str
    repo: str
    tag: str
    digest: str

    @property
    def enroot_uri(self) -> str:
        return f"docker://{self.host}#{self.repo}:{self.tag}"


def listing(sqsh: Path) -> dict[str, tuple[str, str, str, str]]:
    """path → (mode, owner, size, link target) from ``unsquashfs -lln``; no dates, and no directory sizes (how
    squashfs packed the entries)."""
    out = subprocess.run(["unsquashfs", "-lln", "-d", "", str(sqsh)], capture_output=True, text=True,  # noqa: S607
                         check=True).stdout
    tree = {}
    for line in out.splitlines():
        mode, owner, size, _day, _time, *rest = line.split(maxsplit=5)  # the root's name is empty
        name, _, target = (rest or [""])[0].partition(" -> ")
        tree[name or "/"] = (mode, owner, "" if mode.startswith("d") else size, target)
    return tree


def cat(sqsh: Path, name: str) -> bytes:
    return subprocess.run(["unsquashfs", "-cat", str(sqsh), name], capture_output=True, check=True).stdout  # noqa: S607


def enroot_import(uri: str, folder: Path) -> Path:
    """``enroot import`` as root, its folders in ``folder``, plain http allowed (as the test nodes' enroot.conf)."""
    env = {"PATH": f"{pyxis.ENROOT_BIN}:/usr/bin:/bin", "HOME": str(folder), "ENROOT_ALLOW_HTTP": "yes",
           **{f"ENROOT_{key}_PATH": str(folder / key.lower()) for key in ("RUNTIME", "CACHE", "DATA", "TEMP")}}
    (folder / "temp").mkdir(parents=True)
    out = folder / "imported.sqsh"
    done = subprocess.run([str(pyxis.ENROOT_BIN / "enroot"), "import", "--output", str(out), uri], env=env,  # noqa: S603
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def with_provenance(rc: bytes, uri: str) -> bytes:
    """The /etc/rc enroot after 4.1.2 writes, from 4.1.2's: the provenance line first; the empty line after the
    comments is then always there."""
    head = f"# enroot-provenance: {uri}\n".encode()
    return head + rc if rc.startswith(b"# ") else head + b"\n" + rc


def manifest_type(host: str, repo: str, tag: str) -> str:
    """The type of the manifest as stored (both types accepted: the registry converts nothing)."""
    request = urllib.request.Request(f"http://{host}/v2/{repo}/manifests/{tag}", method="HEAD",  # noqa: S310
                                     headers={"Accept": f"{DOCKER_V2}, application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as resp:
        return str(resp.headers["Content-Type"])


@pytest.fixture(scope="module")
def work(podman, debian_image, registry, tmp_path_factory) -> Iterator[WorkImage]:  # type: ignore[no-untyped-def]
    """Labels, ENV, WORKDIR, ENTRYPOINT and CMD: everything enroot writes into its four files."""
    with work_image(debian_image, registry.host, tmp_path_factory.mktemp("work")) as image:
        yield image


@pytest.fixture(scope="module")
def busybox(busybox_image, registry) -> Pushed:  # type: ignore[no-untyped-def]
    """No labels, no WORKDIR: /etc/rc without comments in 4.1.2."""
    repo, tag = f"ckit-enroot/{uuid.uuid4().hex[:8]}", "1"
    pushed = ckit("push", f"docker-daemon:{busybox_image}", f"{registry.host}/{repo}:{tag}", "--insecure")
    assert pushed.returncode == 0, pushed.stderr
    return Pushed(registry.host, repo, tag, pushed.stdout.strip().rsplit("@", 1)[1])


def pushed_work(work: WorkImage) -> Pushed:
    host, _, rest = work.ref.partition("/")
    repo, _, tag = rest.rpartition(":")
    return Pushed(host, repo, tag, work.digest)


@pytest.mark.parametrize("which", ["work", "busybox"])
def test_enroot_imports_what_ckit_pushed_into_ckits_tree(which: str, request: pytest.FixtureRequest,
                                                         tmp_path: Path) -> None:
    image = pushed_work(request.getfixturevalue("work")) if which == "work" else request.getfixturevalue("busybox")
    assert manifest_type(image.host, image.repo, image.tag) == DOCKER_V2  # ckit push's default
    imported = enroot_import(image.enroot_uri, tmp_path / "enroot")
    ours = tmp_path / "ckit.sqsh"
    source = f"docker://{image.host}/{image.repo}"
    made = ckit("convert", f"{source}:{image.tag}", "--to", "sqsh", "-o", str(ours), "--insecure")
    assert made.returncode == 0, made.stderr
    theirs, mine = listing(imported), listing(ours)
    assert set(theirs) <= set(mine) and set(mine) - set(theirs) == CKIT_FILES | (CKIT_MOUNTS - set(theirs))
    differ = {name for name in theirs if theirs[name] != mine[name]}
    assert differ <= {"/etc/rc"}, {name: (theirs[name], mine[name]) for name in differ}  # by the provenance line
    for name in ENROOT_FILES[1:]:
        assert cat(ours, name) == cat(imported, name), name
    rc = cat(imported, "etc/rc")
    assert not rc.startswith(b"# enroot-provenance")  # 4.1.2
    assert cat(ours, "etc/rc") == with_provenance(rc, image.enroot_uri)
    pinned = tmp_path / "pinned.sqsh"
    made = ckit("convert", f"{source}@{image.digest}", "--to", "sqsh", "-o", str(pinned), "--insecure")
    assert made.returncode == 0, made.stderr
    # enroot writes the digest where the tag goes (docker::_parse_uri's tag; the tag of TAG@DIGEST dropped)
    assert cat(pinned, "etc/rc") == with_provenance(rc, f"docker://{image.host}#{image.repo}:{image.digest}")


def test_enroots_login_shell_loses_the_images_path(work: WorkImage, tmp_path: Path) -> None:
    """enroot start of ckit's .sqsh runs the image's ENTRYPOINT (`hello`, on the PATH the image's ENV sets): with
    ENROOT_LOGIN_SHELL=no, what ckit's Pyxis jobs set, it is found; with enroot's login shell a Debian image's
    /etc/profile has replaced PATH (enroot issue #248)."""
    env = {"PATH": f"{pyxis.ENROOT_BIN}:/usr/bin:/bin", "HOME": str(tmp_path),
           **{f"ENROOT_{key}_PATH": str(tmp_path / key.lower()) for key in ("RUNTIME", "CACHE", "DATA", "TEMP")}}
    (tmp_path / "temp").mkdir()
    runs = {login: subprocess.run([str(pyxis.ENROOT_BIN / "enroot"), "start", str(work.sqsh), "x"],  # noqa: S603
                                  env={**env, "ENROOT_LOGIN_SHELL": login}, capture_output=True, text=True,
                                  timeout=300, check=False) for login in ("no", "yes")}
    assert runs["no"].returncode == 0 and runs["no"].stdout.startswith("arg: x\n"), runs["no"].stderr
    assert runs["yes"].returncode != 0 and "hello: not found" in runs["yes"].stderr, runs["yes"].stderr
