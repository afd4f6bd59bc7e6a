"""Two co-tenants of a cluster and what they share: real Unix users (tests/infra/users.py), a cache folder made as
the admin guide says (sticky, every user may write it), images in the local registry, and the Pyxis importer run
as each user exactly as Pyxis runs it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.infra.users import User, as_user
from tests.integration.pyxis_helpers import IMPORTER
from tests.integration.registry_helpers import CKIT, ckit, unique_repo
from tests.integration.test_cache_concurrency import layer, oci_layout


@dataclass(frozen=True)
class Image:
    ref: str  # registry/repo:tag
    hello: bytes  # what /etc/hello holds

    @property
    def uri(self) -> str:
        return f"docker://{self.ref.replace('/', '#', 1)}"


def push(host: str, work: Path, name: str, files: dict[str, bytes], *, env: dict[str, str] | None = None,
         base: dict[str, bytes] | None = None) -> Image:
    """An image with ``files`` (and a base layer, when given) pushed with ckit."""
    layers = ([layer(base)] if base else []) + [layer(files)]
    layout = oci_layout(work / f"layout-{name}", layers)
    ref = f"{host}/{unique_repo(name)}:1"
    pushed = ckit("push", f"oci:{layout}:t", ref, env=env)
    assert pushed.returncode == 0, pushed.stderr
    return Image(ref, files.get("etc/hello", b""))


def shared_base() -> Iterator[Path]:
    """A folder outside pytest's private tmp that every user can traverse (root's, 0755)."""
    base = Path(tempfile.mkdtemp(prefix="ckit-cotenants-"))
    base.chmod(0o755)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)  # noqa: S603,S607 (files of several users)


def cache_folder(base: Path, name: str, mode: int = 0o1777) -> Path:
    folder = base / name
    folder.mkdir()
    folder.chmod(mode)
    return folder


def pyxis_env(user: User, cache: Path, job: int, *, config: str = "", **more: str) -> dict[str, str]:
    """What Pyxis gives the importer it runs as ``user`` for step ``job``.0 (the config file is the admin's)."""
    conf = cache.parent / f"importer-{cache.name}-{user.name}-{job}.yaml"
    conf.write_text(f"cache: {cache}\n{config}")
    conf.chmod(0o644)
    return user.env(SLURM_JOB_ID=str(job), SLURM_STEP_ID="0", SLURM_JOB_UID=str(user.uid),
                    SLURM_JOB_USER=user.name, PYXIS_VERSION="0.24.0", CKIT_IMPORTER_CONFIG=str(conf),
                    ENROOT_CONFIG_PATH=str(user.home / ".config" / "enroot"), **more)


def get(user: User, image: Image | str, cache: Path, job: int, *, config: str = "",
        timeout: float = 120, **more: str) -> subprocess.CompletedProcess[str]:
    uri = image.uri if isinstance(image, Image) else image
    return as_user(user, [IMPORTER, "get", uri], env=pyxis_env(user, cache, job, config=config, **more),
                   timeout=timeout)


def ckit_as(user: User, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return as_user(user, [CKIT, *args], env=user.env(**env), timeout=timeout)


def hello(path: str | Path) -> bytes:
    """/etc/hello of a squashfs, read as root (what a job would run)."""
    done = subprocess.run(["unsquashfs", "-cat", str(path), "etc/hello"], capture_output=True,  # noqa: S603,S607
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def owned_by(path: Path, user: User) -> Path:
    """``path`` (a file, folder or link root made) handed to ``user``, as if they had made it."""
    os.lchown(path, user.uid, user.gid)
    return path


def plant(path: Path, user: User, data: bytes | None = None, *, link: str | None = None) -> Path:
    """A file (or a link) of ``user``'s at ``path``, with the folders above it, all theirs."""
    made = []
    folder = path.parent
    while not folder.exists():
        made.append(folder)
        folder = folder.parent
    for folder in reversed(made):
        folder.mkdir()
        owned_by(folder, user)
    if link is not None:
        path.symlink_to(link)
    else:
        path.write_bytes(data or b"")
    return owned_by(path, user)


def record_stat(record: Path, artifact: Path, user: User) -> None:
    """Make ``record`` (an artifact record of ``user``'s tree) name ``artifact``'s identity as it is now."""
    meta = json.loads(record.read_text())
    st = artifact.stat()
    meta["stat"] = [st.st_ino, st.st_size, st.st_mtime_ns]
    record.write_text(json.dumps(meta))
    owned_by(record, user)


def world_writable(folder: Path) -> list[str]:
    """Files and folders under ``folder`` that every user may write."""
    found = []
    for path in [folder, *folder.rglob("*")]:
        st = path.lstat()
        if st.st_mode & 0o002 and not path.is_symlink():
            found.append(str(path))
    return found


__all__ = ["CKIT", "Image"]
