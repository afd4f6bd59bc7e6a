"""File operations in folders other users can reach.

A cache folder on a cluster file system is shared by users who do not trust each other. Whatever ckit reads there
could have been planted by another user, and whatever it creates there another user could try to redirect. The
rules, each one place here:

* **Nothing planted is followed.** Files are opened with ``O_NOFOLLOW`` and ``O_NONBLOCK`` and used only when
  ``fstat`` says they are regular files: a symlink to ``~/.bashrc``, a FIFO or ``/dev/zero`` is a miss, never a
  write, a hang or an endless read.
* **Nothing is read unbounded.** Records are read up to a size limit.
* **Ownership decides trust.** A file or folder counts only when it belongs to the user whose folder it is in and no
  group or other user can write it (:func:`flaw`).
* **Nothing is created that others may write.** Files are created with ``O_EXCL | O_NOFOLLOW`` under a fresh name and
  renamed into place; modes are set explicitly, whatever the umask.

Standard library only and cheap to import: the Pyxis importer's cached path uses it.
"""

from __future__ import annotations

import os
import stat

from ..errors import ConfigError

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RECORD_MAX = 1 << 16  # bytes: a record is a few hundred


class Unsafe(ConfigError):  # noqa: N818 - reads as "the path is unsafe"
    """A path failed a safety check; the message says which and why (exit 2: nothing was changed)."""


def flaw(st: os.stat_result, uid: int | None) -> str | None:
    """Why a file or folder cannot be trusted as ``uid``'s, or None: another owner, or writable by others."""
    if uid is not None and st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"its group or other users may write it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def disk_bytes(st: os.stat_result) -> int:
    """The space a file takes on disk (its blocks, not what its size claims: a sparse file takes next to none)."""
    return int(getattr(st, "st_blocks", 0)) * 512 if hasattr(st, "st_blocks") else st.st_size


def open_checked(path: str | os.PathLike[str], uid: int | None = None, *, dir_fd: int | None = None) -> int | None:
    """A descriptor of the regular file at ``path`` (not a link) that is sound as ``uid``'s, or None."""
    try:
        fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or flaw(st, uid) is not None:
        os.close(fd)
        return None
    return fd


def read_small(path: str | os.PathLike[str], uid: int | None = None, limit: int = RECORD_MAX, *,
               dir_fd: int | None = None) -> bytes | None:
    """The bytes of a small regular file (see :func:`open_checked`), or None when it is absent, not sound or
    larger than ``limit``."""
    fd = open_checked(path, uid, dir_fd=dir_fd)
    if fd is None:
        return None
    try:
        if os.fstat(fd).st_size > limit:
            return None
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks) if size <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def dir_flaw(path: str | os.PathLike[str], uid: int | None) -> str | None:
    """Why the folder at ``path`` cannot be trusted as ``uid``'s ("absent" when there is none), or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as err:
        return err.strerror or str(err)
    if not stat.S_ISDIR(st.st_mode):
        return "it is a symbolic link" if stat.S_ISLNK(st.st_mode) else "it is not a folder"
    return flaw(st, uid)


def ensure_dir(path: str | os.PathLike[str], mode: int = 0o755) -> None:
    """The folder ``path`` of this user, made with ``mode`` when missing (a folder of this user's that others may
    write, or read beyond ``mode``, is closed to them: it is about to hold what this user serves or keeps);
    :class:`Unsafe` when what is there is a link, not a folder, or another user's (PermissionError etc. pass
    through)."""
    try:
        os.mkdir(path, mode)
        os.chmod(path, mode)  # the umask may have taken bits the folder needs (others read public images)
    except FileExistsError:
        st = os.lstat(path)
        closed = ~0o022 & ~(0o077 & ~mode)  # never writable by others; no more readable by them than ``mode``
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & ~closed:
            os.chmod(path, stat.S_IMODE(st.st_mode) & closed)
    why = dir_flaw(path, os.geteuid())
    if why is not None:
        raise Unsafe(f"{os.fspath(path)}: {why}")


def write_temp(folder: str | os.PathLike[str], name: str, data: bytes, mode: int = 0o644) -> str:
    """``data`` in a new file of ``folder`` under a fresh name of its own (``O_EXCL``, never through a link), given
    ``mode``; its path, for the caller to rename into place."""
    temp = os.path.join(folder, f".{name[:100]}.{os.urandom(8).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        _remove(temp)
        raise
    os.close(fd)
    return temp


def write_file(folder: str | os.PathLike[str], name: str, data: bytes, mode: int = 0o644) -> None:
    """``folder/name`` replaced atomically by ``data`` (:func:`write_temp`, then a rename)."""
    temp = write_temp(folder, name, data, mode)
    try:
        os.replace(temp, os.path.join(folder, name))
    except BaseException:
        _remove(temp)
        raise


def _remove(path: str) -> None:
    try:  # noqa: SIM105 - contextlib costs the cheap importers
        os.unlink(path)
    except OSError:
        pass


def touch(path: str | os.PathLike[str], mode: int = 0o644) -> bool:
    """Create or refresh the regular file ``path`` of this user (never through a link); whether it worked."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        os.utime(fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def open_dir(base: str | os.PathLike[str], *parts: str) -> int:
    """A descriptor of the folder ``base/part/…``, each part opened without following a link (``base`` is
    followed: it is the folder the caller was given). OSError when a part is missing, a link or not a folder."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in parts:
        try:
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def unlink_in(base: str | os.PathLike[str], parts: tuple[str, ...], name: str) -> bool:
    """Remove the entry ``name`` of the folder ``base/parts…`` (reached without following a link, so a folder
    swapped for a link meanwhile cannot send the removal elsewhere); whether it was removed."""
    try:
        dfd = open_dir(base, *parts)
    except OSError:
        return False
    try:
        os.unlink(name, dir_fd=dfd)
        return True
    except OSError:
        return False
    finally:
        os.close(dfd)


def place_flaw(path: str | os.PathLike[str], allowed: tuple[int, ...] = ()) -> str | None:
    """Why the folder at ``path`` may have been made or redirected by a user other than root, this user or
    ``allowed``, or None. Walks the path as the kernel does (links followed, each one checked): a part that lies in
    a folder others may write (``/scratch``, ``/tmp``) counts only when one of those users owns it, since anyone
    else could have made it (or a link with its name) before its first use. A missing part is fine: it is made by
    whoever uses the path first, as themselves."""
    trusted = {0, os.geteuid(), *allowed}
    todo = list(reversed(os.path.abspath(path).split("/")[1:]))
    current, hops = "/", 0
    while todo:
        name = todo.pop()
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        here = os.path.join(current, name)
        try:
            shared = os.stat(current).st_mode & 0o022
            st = os.lstat(here)
        except FileNotFoundError:
            return None
        except OSError as err:
            return f"{here}: {err.strerror or err}"
        if shared and st.st_uid not in trusted:
            return (f"{here} belongs to uid {st.st_uid} and lies in {current}, which others may write: anyone could "
                    "have made it")
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                return f"{here}: too many levels of symbolic links"
            target = os.readlink(here)
            if target.startswith("/"):
                current = "/"
            todo.extend(reversed(target.split("/")))
            continue
        current = here
    return None
