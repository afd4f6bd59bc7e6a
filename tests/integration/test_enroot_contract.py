"""ckit's ``.sqsh`` held to enroot's layout and to how Pyxis and Charliecloud start it, with Debian's own programs.

enroot and Pyxis do not run here, so what they showed on a real cluster is kept as a contract:

* **Layout.** :func:`enroot_standin` is a stand-in for ``enroot import``, which cannot run here, made only of Debian's
  tools and the facts of enroot's image format: ``skopeo copy`` of the pushed image to an OCI layout, ``umoci raw
  unpack`` (layers merged, whiteouts applied), ``/dev/*`` dropped and enroot's ``u+rX``/dir ``u+w``, then enroot's
  four files and WORKDIR written into a layer of their own, overlaid on top (so they replace the image's) and
  squashed with enroot's options (``mksquashfs -all-root -comp lzo -noD -exit-on-error``). ``ckit convert`` of the
  same pushed image by its tag has the same tree by ``unsquashfs -lln`` (names, modes, owners, sizes, link targets)
  and by ``sqfsdiff`` (contents too), but for what ckit documents adding for Charliecloud: ``/ch`` and its two
  files, and the mount points ch-run binds (``/dev`` … ``/mnt/9``, the VOLUME folders), each only where the image
  has nothing; enroot's four files are byte for byte the same. ``ckit pull --to sqsh`` pins the digest it pulled,
  and its file differs from that only in /etc/rc's provenance line, the digest in the tag's place as enroot writes
  it for ``IMAGE@DIGEST``. Two images: Debian with labels, ENV, WORKDIR, VOLUMEs, deletions, ENTRYPOINT and CMD;
  busybox with none of these (enroot's defaults).
* **Pyxis with ``use_squashfuse=1``.** The file is mounted as Pyxis has enroot start it (``squashfuse``, an overlay
  with a tmpfs upper layer), Pyxis's hook writes ``exec "$@"`` into ``/etc/rc.local``, and ``/etc/rc`` runs with the
  image's ``/etc/environment``, by the passwd shell, as enroot does: without a login shell (``ENROOT_LOGIN_SHELL=no``,
  what ckit's Pyxis jobs set) the command is found on the image's PATH and sees its ENV and WORKDIR; as a login shell,
  Debian's ``/etc/profile`` resets PATH and the command is not found (enroot issue #248).
* **Charliecloud.** ``ch-run`` (Debian 12's 0.31) runs the same file as an ordinary user, with the image's ENV
  (``--set-env``) and WORKDIR (``/ch/metadata.json``'s ``cwd``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from buildkit.image.rootfs import charliecloud as charliecloud_rootfs
from tests.integration.folders import readable_folder
from tests.integration.registry_helpers import ckit

WORKDIR = "/srv/contract"
BIN = "/opt/contract/bin"
IMAGE_PATH = f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VALUE = "it's \"here\" $HOME"  # quotes and a $ that no runtime may expand
VOLUMES = ("/var/cache/contract", "/data")
# found only on the image's PATH: what it sees, then its arguments
HELLO = '#!/bin/sh\necho "hello pwd=$(pwd) path=$PATH value=$CONTRACT_VALUE args=$*"\n'
ESCAPED = VALUE.replace('"', '\\"').replace("$", "\\$")  # in a Containerfile's double quotes
CONTAINERFILE = f"""\
FROM {{base}}
LABEL org.ckit.contract="two words" org.ckit.apostrophe="it's"
ENV PATH={BIN}:$PATH CONTRACT_VALUE="{ESCAPED}"
WORKDIR {WORKDIR}
VOLUME {json.dumps(list(VOLUMES))}
COPY hello {BIN}/hello
RUN rm /etc/issue.net && rm -r /usr/share/doc/debian-archive-keyring
ENTRYPOINT ["hello"]
CMD ["default arg"]
"""
RC_LOCAL = ("# This file is sourced by /etc/rc when the container starts.\n"
            "# It can be used to manipulate the entrypoint or the command of the container.\n")
# what ckit adds for Charliecloud (docs/building.md, buildkit/image/rootfs/charliecloud.py), besides VOLUME folders
CKIT_FILES = {"/ch", "/ch/environment", "/ch/metadata.json"}
ENCODING = re.compile(r" has an? (basic|extended) type$")
CKIT_MOUNTS = {*charliecloud_rootfs.MOUNT_DIRS, *charliecloud_rootfs.MOUNT_FILES}


def sh(*argv: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,  # noqa: S603
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0 or not check, f"{argv}: {done.stderr}"
    return done


@dataclass(frozen=True)
class Pushed:
    """An image ``ckit push`` sent (its default format, Docker schema 2) to the plain-http registry."""

    host: str
    repo: str
    tag: str
    digest: str

    @property
    def ref(self) -> str:
        return f"{self.host}/{self.repo}:{self.tag}"

    def enroot_uri(self, pinned: bool = False) -> str:
        """enroot's form; pinned, enroot writes the digest where the tag goes."""
        return f"docker://{self.host}#{self.repo}:{self.digest if pinned else self.tag}"


def push(source: str, host: str) -> Pushed:
    repo, tag = f"ckit-enroot-contract/{uuid.uuid4().hex[:8]}", "1"
    done = ckit("push", source, f"{host}/{repo}:{tag}", "--insecure")
    assert done.returncode == 0, done.stderr
    return Pushed(host, repo, tag, done.stdout.strip().rsplit("@", 1)[1])


# ---- the stand-in for `enroot import`, from the facts of enroot's image format -------------------------------------

def bash_quoted(words: list[str]) -> str:
    """``${words[@]@Q}`` as enroot expands it into /etc/rc: bash itself quotes."""
    return sh("bash", "-c", 'w=("$@"); printf %s "${w[*]@Q}"', "_", *words).stdout


def rc_text(config: dict[str, Any], uri: str) -> str:
    """/etc/rc: provenance, one comment per label (newlines as spaces), an empty line, then the WORKDIR and exec."""
    labels = "".join(f"# {key} {value.replace(chr(10), ' ')}\n" for key, value in (config.get("Labels") or {}).items())
    workdir = config.get("WorkingDir") or "/"
    entrypoint, cmd = config.get("Entrypoint") or [], config.get("Cmd") or []
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    return (f"# enroot-provenance: {uri}\n{labels}\n"
            f'mkdir -p "{workdir}" 2> /dev/null\ncd "{workdir}" && unset OLDPWD || exit 1\n\n'
            "if [ -s /etc/rc.local ]; then\n    . /etc/rc.local\nfi\n\n"
            f'if [ $# -gt 0 ]; then\n    exec {bash_quoted(entrypoint)} "$@"\n'
            f"else\n    exec {bash_quoted(entrypoint)} {bash_quoted(cmd)}\nfi\n")


def configure(layer: Path, config: dict[str, Any], uri: str) -> None:
    """enroot's config layer: its four files (0644) and the WORKDIR, in directories mkdir makes (0755)."""
    (layer / "etc").mkdir(mode=0o755, parents=True)
    files = {"rc": rc_text(config, uri), "rc.local": RC_LOCAL,
             "environment": "".join(f"{entry}\n" for entry in config.get("Env") or []),
             "fstab": "".join(f"${{ENROOT_ROOTFS}}{vol} {vol} none x-create=dir,bind,rw,nosuid,nodev\n"
                              for vol in sorted(config.get("Volumes") or {}))}
    for name, text in files.items():
        (layer / "etc" / name).write_text(text)
        (layer / "etc" / name).chmod(0o644)
    sh("mkdir", "-p", "-m", "0755", f"{layer}{config.get('WorkingDir') or '/'}")


def enroot_standin(image: Pushed, folder: Path) -> tuple[Path, dict[str, Any]]:
    """A stand-in for ``enroot import URI`` (which cannot run here) made only of Debian's tools: see the module's
    docstring. The .sqsh, and the image's config as skopeo read it."""
    layout, rootfs, layer, merged = (folder / name for name in ("oci", "rootfs", "layer0", "merged"))
    folder.mkdir(parents=True)
    sh("skopeo", "copy", "-q", "--src-tls-verify=false", f"docker://{image.ref}", f"oci:{layout}:a")
    config = json.loads(sh("skopeo", "inspect", "--config", f"oci:{layout}:a").stdout).get("config") or {}
    sh("umoci", "raw", "unpack", "--image", f"{layout}:a", str(rootfs))
    for entry in (rootfs / "dev").glob("*"):  # enroot's tar leaves out dev/*, never dev itself
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    sh("chmod", "-R", "u+rX", str(rootfs))
    sh("find", str(rootfs), "-maxdepth", "15", "-type", "d", "-exec", "chmod", "u+w", "{}", "+")
    configure(layer, config, image.enroot_uri())
    merged.mkdir()
    out = folder / "standin.sqsh"
    # the merged view of the config layer over the image, squashed with enroot's default options
    sh("unshare", "--mount", "--propagation", "private", "sh", "-ec",
       'mount -t overlay overlay -o "lowerdir=$1:$2" "$3"\n'
       'exec mksquashfs "$3" "$4" -all-root -no-progress -quiet -processors 2 -comp lzo -noD -exit-on-error',
       "standin", str(layer), str(rootfs), str(merged), str(out))
    return out, config


# ---- reading squashfs files with squashfs-tools and squashfs-tools-ng ----------------------------------------------

def listing(sqsh: Path) -> dict[str, tuple[str, str, str, str]]:
    """path → (mode, owner, size, link target) from ``unsquashfs -lln``: no dates, no directory sizes (how the
    entries were packed)."""
    tree = {}
    for line in sh("unsquashfs", "-lln", "-d", "", str(sqsh)).stdout.splitlines():
        mode, owner, size, _day, _time, *rest = line.split(maxsplit=5)  # the root's name is empty
        name, _, target = (rest or [""])[0].partition(" -> ")
        tree[name or "/"] = (mode, owner, "" if mode.startswith("d") else size, target)
    return tree


def cat(sqsh: Path, name: str) -> str:
    return sh("unsquashfs", "-cat", str(sqsh), name).stdout


def sqfsdiff(old: Path, new: Path) -> tuple[set[str], list[str]]:
    """``sqfsdiff``'s report (types, owners, modes, link targets, contents; not dates): the names only ``new``
    has, and every other line but the inode encodings it names (a basic or an extended directory inode, how the
    writer packed it, not what the tree holds)."""
    done = sh("sqfsdiff", "-a", str(old), "-b", str(new), check=False)
    assert done.returncode in (0, 1), done.stderr  # 2: it could not compare
    lines = done.stdout.splitlines()
    added = {"/" + line.removeprefix("> ") for line in lines if line.startswith("> ")}
    return added, [line for line in lines if not line.startswith("> ") and not ENCODING.search(line)]


def additions(config: dict[str, Any], theirs: set[str]) -> set[str]:
    """What ckit documents adding to the image's tree: each mount point only where the image has nothing."""
    mounts = CKIT_MOUNTS | {vol.rstrip("/") for vol in config.get("Volumes") or {}}
    return CKIT_FILES | (mounts - theirs)


# ---- the images ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """Every user may read it: ch-run runs as an ordinary user."""
    with readable_folder("ckit-enroot-contract-") as path:
        yield path


@pytest.fixture(scope="module")
def work(podman, debian_image, registry, folder) -> Iterator[Pushed]:  # type: ignore[no-untyped-def]
    """Debian with labels, an ENV that prepends to PATH, WORKDIR, VOLUMEs, a deletion, ENTRYPOINT and CMD."""
    import docker

    from tests.infra.containers import remove_images

    context = folder / "context"
    context.mkdir()
    (context / "Containerfile").write_text(CONTAINERFILE.format(base=debian_image))
    (context / "hello").write_text(HELLO)
    (context / "hello").chmod(0o755)
    tag = f"localhost/ckit-enroot-contract:{uuid.uuid4().hex[:8]}"
    try:
        sh("podman", "build", "-q", "--network", "none", "-t", tag, str(context))
        yield push(f"docker-daemon:{tag}", registry.host)
    finally:
        remove_images(docker.from_env(), [tag])


@pytest.fixture(scope="module")
def busybox(busybox_image, registry) -> Pushed:  # type: ignore[no-untyped-def]
    """No labels, no WORKDIR, no ENTRYPOINT: enroot's defaults."""
    return push(f"docker-daemon:{busybox_image}", registry.host)


# ---- the layout -----------------------------------------------------------------------------------------------------

def ckit_sqsh(image: Pushed, out: Path, *, pulled: bool) -> Path:
    """``ckit convert`` of the image by its tag, or ``ckit pull --to sqsh`` (which pins the digest it pulled)."""
    out.mkdir(parents=True, exist_ok=True)
    done = (ckit("pull", image.ref, "--to", "sqsh", "-o", str(out), "--json") if pulled else
            ckit("convert", f"docker://{image.ref}", "--to", "sqsh", "-o", str(out / "tag.sqsh"), "--json"))
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["path"])


def same_tree(standin: Path, ours: Path, config: dict[str, Any]) -> None:
    theirs, mine = listing(standin), listing(ours)
    added = additions(config, set(theirs))
    assert set(mine) - set(theirs) == added and set(theirs) <= set(mine), set(mine) ^ set(theirs)
    assert {name: (theirs[name], mine[name]) for name in theirs if mine[name] != theirs[name]} == {}
    assert sqfsdiff(standin, ours) == (added, [])


@pytest.fixture(scope="module")
def work_sqsh(work: Pushed, folder: Path) -> Path:
    """ckit's .sqsh of the test image, as a user pulls it from the registry."""
    return ckit_sqsh(work, folder / "pulled", pulled=True)


@pytest.mark.parametrize("which", ["work", "busybox"])
def test_ckits_sqsh_has_enroots_tree(which: str, request: pytest.FixtureRequest, folder: Path) -> None:
    image: Pushed = request.getfixturevalue(which)
    scratch = folder / f"layout-{which}"
    standin, config = enroot_standin(image, scratch)
    superblock = sh("unsquashfs", "-s", str(standin)).stdout  # enroot's: lzo, data blocks stored uncompressed
    assert "Compression lzo" in superblock and "Data is uncompressed" in superblock, superblock
    ours = ckit_sqsh(image, scratch / "ckit", pulled=False)
    for name in ("etc/rc", "etc/rc.local", "etc/environment", "etc/fstab"):
        assert cat(ours, name) == cat(standin, name), name
    same_tree(standin, ours, config)
    # the deletions of the image's last layer (whiteouts) are applied in both
    assert which == "busybox" or not {"/etc/issue.net", "/usr/share/doc/debian-archive-keyring"} & set(listing(ours))
    # pulled, the image is pinned to its digest: enroot writes the digest where the tag goes; nothing else changes
    pulled = request.getfixturevalue("work_sqsh") if which == "work" else ckit_sqsh(image, scratch, pulled=True)
    assert cat(pulled, "etc/rc") == rc_text(config, image.enroot_uri(pinned=True))
    assert sqfsdiff(ours, pulled) == (set(), ["regular file /etc/rc differs"])


# ---- Pyxis with use_squashfuse=1, and ch-run ------------------------------------------------------------------------

# Pyxis has enroot start an unnamed container straight from the file: squashfuse, an overlay with a tmpfs upper
# layer; enroot-switchroot then clears the environment, loads the image's /etc/environment (comments and lines
# without "=" dropped) and runs /etc/rc with the passwd shell, as a login shell unless ENROOT_LOGIN_SHELL=no
START = r"""set -eu
sqsh=$1 d=$2
mkdir "$d/lower" "$d/rw" "$d/root"
squashfuse "$sqsh" "$d/lower"
trap 'umount "$d/root" 2>/dev/null; umount "$d/rw" 2>/dev/null; fusermount -u "$d/lower"' EXIT
mount -t tmpfs tmpfs "$d/rw"
mkdir "$d/rw/upper" "$d/rw/work"
mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/rw/upper,workdir=$d/rw/work" "$d/root"
echo "mounts $(findmnt -n -o FSTYPE "$d/root") $(findmnt -n -o FSTYPE "$d/lower")"
env=()
while IFS= read -r line; do case $line in '#'*) ;; *=*) env+=("$line") ;; esac; done < "$d/root/etc/environment"
shell=$(awk -F: '$1 == "root" { print $7 }' "$d/root/etc/passwd")
run() {
    echo "== $1"; shift
    env -i "${env[@]}" HOME=/root USER=root chroot "$d/root" "${shell:-/bin/sh}" "$@" 2>&1 && echo "rc=0" || echo "rc=$?"
}
run entrypoint /etc/rc
# Pyxis's hook: the step's command instead of the image's ENTRYPOINT; written to the overlay's upper layer
printf 'exec "$@"\n' > "$d/root/etc/rc.local"
test -f "$d/rw/upper/etc/rc.local"
run pyxis /etc/rc hello pyxis
run login -l /etc/rc hello pyxis
"""


def cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


def seen(args: str) -> str:
    """What ``hello`` prints when it runs in the image's WORKDIR with its ENV."""
    return f"hello pwd={WORKDIR} path={IMAGE_PATH} value={VALUE} args={args}\n"


def runs(out: str) -> dict[str, tuple[str, str]]:
    """START's output: name → (what the run printed, its exit code)."""
    found = {}
    for part in out.split("== ")[1:]:
        name, _, rest = part.partition("\n")
        text, _, code = rest.rpartition("rc=")
        found[name] = (text, code.strip())
    return found


def test_pyxis_squashfuse_start_reaches_the_image_path_without_a_login_shell(work_sqsh: Path, folder: Path) -> None:
    mnt = folder / "pyxis"
    mnt.mkdir()
    out = sh("unshare", "--mount", "--propagation", "private", "bash", "-c", START, "start", str(work_sqsh),
             str(mnt)).stdout
    assert out.split("\n", 1)[0].split() == ["mounts", "overlay", "fuse.squashfuse"], out
    ran = runs(out)
    assert ran["entrypoint"] == (seen("default arg"), "0")  # enroot start: the image's ENTRYPOINT and CMD
    assert ran["pyxis"] == (seen("pyxis"), "0")
    # a login shell: Debian's /etc/profile has replaced the image's PATH, so the step's command is not found
    text, rc = ran["login"]
    assert rc == "127" and "hello: not found" in text, text
    # the mounts went with their namespace, and squashfuse with its mount
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and str(mnt).encode() in cmdline(pid)]


def test_ch_run_runs_it_as_an_ordinary_user(work_sqsh: Path, charliecloud) -> None:  # type: ignore[no-untyped-def]
    user = charliecloud.user.pw_name
    cwd = json.loads(cat(work_sqsh, "ch/metadata.json"))["cwd"]
    out = sh("runuser", "-u", user, "--", "env", f"USER={user}", "ch-run", "--set-env", "--env-no-expand", "--cd",
             cwd, str(work_sqsh), "--", "hello", "ch").stdout
    assert out == seen("ch")
