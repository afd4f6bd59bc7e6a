"""Atomic artifacts and the one output guard; the bounded readers of input files (a small file whole, the tail
of a log); copies between files in the kernel.

Every writer of a user-visible file goes through :func:`atomic_path` (or :func:`place_copy` for a file that
exists already): it checks the output path first (:func:`check_output`), writes a temporary file next to it,
verifies it and renames it into place, so an interrupted or failed write never leaves a file at the final path.

The output guard refuses, before any work is done, anything at the output path that ckit may not replace: a
folder, a device node, a FIFO or socket, a path under a file, a name longer than the file system allows, a
read-only or unwritable folder, and an output that is one of the command's inputs (the same file, also through
a hard or symbolic link). A symbolic link at the output path is followed, as ``docker login`` does with its
config file: the file it points to is what gets replaced, and the guard checks that file.

Temporary files are named ``.NAME.<random>.part`` and held under an ``flock`` while they are written. A writer
killed with SIGKILL cannot remove its own; the next write of the same output removes every such file that no
live process holds, however young. The lock is the only sign of life: a writer that finds its new temp file gone
once it holds the lock (a cleaner took it, between its creation and the lock, for a dead writer's) makes another.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from ..errors import CkitError, ConfigError, FileError, os_error
from . import identity as identity  # re-exported: it lives where the cheapest importers can reach it

NAME_MAX = 255
PATH_MAX = 4096
ATTEMPTS = 100  # new temp files a writer makes before it gives up, each removed by a cleaner before it was locked
_KINDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _check_name(path: Path, flag: str) -> None:
    text = os.fsencode(path)
    if len(text) >= PATH_MAX or any(len(part) > NAME_MAX for part in text.split(b"/")):
        raise ConfigError(f"{flag} {str(path)[:80]}…: the path is too long for the file system",
                          hint=f"file names may have at most {NAME_MAX} bytes, paths {PATH_MAX - 1}")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _check_inputs(real: Path, st: os.stat_result, inputs: Iterable[Path], flag: str) -> None:
    for given in inputs:
        try:
            other = os.stat(given)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            raise ConfigError(f"{flag} {real}: that is the input {given}; ckit does not overwrite its input",
                              hint="write the output to another file")
        if stat.S_ISDIR(other.st_mode) and _inside(real, Path(os.path.realpath(given))):
            raise ConfigError(f"{flag} {real}: that file is part of the input {given}",
                              hint="write the output outside the input")


def _check_folder(real: Path, flag: str) -> None:
    """The nearest existing folder above ``real`` must be a folder ckit can write in."""
    folder = real.parent
    while True:
        try:
            st = os.stat(folder)
            break
        except FileNotFoundError:
            folder = folder.parent
        except OSError as err:
            raise _refused(flag, real, err) from err
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{flag} {real}: {folder} is {_kind(st.st_mode)}, not a folder",
                          hint="choose an output path in a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        why = "is on a read-only file system" if read_only else "is not writable for you"
        raise ConfigError(f"{flag} {real}: the folder {folder} {why}", hint="write the output somewhere else")


def _refused(flag: str, path: Path, err: OSError) -> ConfigError:
    if err.errno == errno.ENOTDIR:
        return ConfigError(f"{flag} {path}: a part of the path is a file, not a folder",
                           hint="choose an output path in a folder")
    if err.errno == errno.ELOOP:
        return ConfigError(f"{flag} {path}: too many levels of symbolic links")
    if err.errno == errno.ENAMETOOLONG:
        return ConfigError(f"{flag} {path}: the path is too long for the file system")
    return ConfigError(f"{flag} {path}: {err.strerror}")


def _check_link(path: Path, flag: str) -> None:
    """Refuse a symbolic link at the output path that another user made in a folder others may write: ckit follows
    only this user's links there, or the folder owner's (the kernel's ``protected_symlinks`` rule, which not every
    file system applies, made ckit's own)."""
    try:
        link = os.lstat(path)
        if not stat.S_ISLNK(link.st_mode):
            return
        folder = os.stat(path.parent)
    except OSError:
        return
    if folder.st_mode & 0o022 and link.st_uid not in (os.geteuid(), folder.st_uid):
        raise ConfigError(f"{flag} {path}: a symbolic link that uid {link.st_uid} made in a folder others may "
                          "write; ckit does not write through it", hint="remove the link, or write elsewhere")


def check_output(path: Path | str, *, inputs: Iterable[Path | str] = (), flag: str = "output") -> Path:
    """The real path an artifact for ``path`` is written to, or a ConfigError (exit 2) saying why ckit may not
    replace what is there. ``inputs`` are the files (or folders) the command reads."""
    path = Path(path)
    _check_name(path, flag)
    _check_link(path, flag)
    real = Path(os.path.realpath(path))  # a symlink at the path: its target is what gets replaced
    _check_name(real, flag)
    try:
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise _refused(flag, path, err) from err
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{flag} {path}: is a folder; give a file name",
                              hint=f"e.g. {path}/{'NAME'}")
        if not stat.S_ISREG(st.st_mode):
            shown = f"{path} (-> {real})" if real != path.absolute() else str(path)
            raise ConfigError(f"{flag} {shown}: is {_kind(st.st_mode)}; ckit replaces only regular files",
                              hint="choose another output path")
        _check_inputs(real, st, [Path(p) for p in inputs], flag)
    _check_folder(real, flag)
    return real


# --- temporary files next to the output --------------------------------------------------------------------
def _prefix(final: Path) -> str:
    return f".{final.name[:200]}."  # room for the random part and the suffix within NAME_MAX


def clean_stale(final: Path, suffix: str) -> int:
    """Remove the temp files of ``final`` whose writers are gone: no process holds their flock. No grace for a
    young one: a writer that lost its file before it locked it notices (:func:`_held`) and makes another."""
    removed = 0
    with suppress(OSError):
        for candidate in final.parent.glob(f"{glob_escape(_prefix(final))}*{glob_escape(suffix)}"):
            with suppress(OSError):
                fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while its writer lives
                    if os.path.samestat(st, os.lstat(candidate)):  # still the file whose lock was free
                        candidate.unlink()
                        removed += 1
                finally:
                    os.close(fd)
    return removed


def _held(fd: int, path: Path | str, shared: bool = False) -> bool:
    """Lock ``fd`` (the file just made at ``path``); whether ``path`` still names it. A cleaner may have removed
    it between its creation and the lock, taking it for a dead writer's: then the caller makes another."""
    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)  # marks it as in use until closed or dead
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except FileNotFoundError:
        return False


def _new_temp(final: Path, suffix: str) -> tuple[int, Path]:
    """A new temp file next to ``final``, locked; its descriptor and path."""
    for _ in range(ATTEMPTS):
        fd, name = tempfile.mkstemp(prefix=_prefix(final), suffix=suffix, dir=final.parent)
        if _held(fd, name):
            return fd, Path(name)
        os.close(fd)
    raise FileError(f"{final}: every temporary file ckit made next to it was removed at once",
                    hint="another program removes the files of this folder as they appear; write elsewhere")


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


@contextmanager
def _locked_temp(final: Path, suffix: str) -> Iterator[Path]:
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(final, suffix)
        fd, tmp = _new_temp(final, suffix)
    except OSError as err:
        raise os_error(err, final) from err
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)
        os.close(fd)


@contextmanager
def atomic_path(
    final: Path,
    *,
    mode: int = 0o644,
    suffix: str = ".part",
    verify: Callable[[Path], None] | None = None,
    inputs: Iterable[Path | str] = (),
) -> Iterator[Path]:
    """Yield a temporary path (mode 0600) in ``final``'s folder; when the block succeeds, fsync it, ``verify``
    it, set ``mode`` and rename it to ``final``.

    ``final`` passes :func:`check_output` first. On any exception (KeyboardInterrupt included) the temporary
    file is removed and ``final`` is untouched; an OSError (disk full, read-only) becomes a FileError naming it.
    """
    final = check_output(final, inputs=inputs)
    with _locked_temp(final, suffix) as tmp:
        try:
            yield tmp
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            if verify is not None:
                verify(tmp)
            tmp.chmod(mode)
            os.replace(tmp, final)
            fsync_dir(final.parent)
        except OSError as err:
            raise os_error(err, final) from err


def atomic_write(final: Path, data: bytes, *, mode: int = 0o644, inputs: Iterable[Path | str] = ()) -> None:
    with atomic_path(final, mode=mode, inputs=inputs) as tmp:
        tmp.write_bytes(data)


def place_copy(src: Path, dest: Path, *, inputs: Iterable[Path | str] = ()) -> Path:
    """Put ``src``'s bytes at ``dest`` atomically: a hard link when on the same file system, else a copy.
    ``dest`` passes the output guard (with ``inputs``); when it is ``src`` already, nothing is done."""
    real = check_output(dest, inputs=inputs)
    if real.exists() and os.path.samefile(src, real):
        return Path(dest)  # already this file (a hard link from an earlier export)
    with _locked_temp(real, ".tmp") as tmp:
        held = -1
        try:
            held = _linked_or_copied(Path(src), tmp)
            if tmp.stat().st_size != Path(src).stat().st_size:
                raise FileError(f"{dest}: the copy of {src} is incomplete")
            os.replace(tmp, real)
        except OSError as err:
            raise os_error(err, dest) from err
        finally:
            if held >= 0:
                os.close(held)
    return Path(dest)


def _linked_or_copied(src: Path, tmp: Path) -> int:
    """``src``'s bytes at ``tmp`` (a hard link, else a copy), a new file there that is held like the temp file it
    replaces (a shared lock: a link is ``src`` itself); the descriptor that holds it."""
    for _ in range(ATTEMPTS):
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:  # a copy made 0600, then given the image's mode: a private image's copy stays private
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
            shutil.copyfile(src, tmp)
            shutil.copymode(src, tmp)
            with tmp.open("rb") as f:
                os.fsync(f.fileno())
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        if _held(fd, tmp, shared=True):
            return fd
        os.close(fd)
    raise FileError(f"{tmp.parent}: every temporary file ckit made there was removed at once",
                    hint="another program removes the files of this folder as they appear; write elsewhere")


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- bounded reads of small input files ---------------------------------------------------------------------
def read_capped(path: Path | str, limit: int, what: str, *, error: type[CkitError] = ConfigError) -> bytes:
    """The bytes of a small input file, refused (``error``) unless it is a regular file of at most ``limit``
    bytes. A FIFO, a device (``/dev/zero``) or a link to one is refused before anything is read from it.
    OSErrors (missing file, no permission) are the caller's to word."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block the open
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what}: {path} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise error(f"{what}: {path} is {st.st_size} bytes, more than the {limit} ckit reads",
                        hint="the file is not what ckit expects there (the limits: docs/safety.md)")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise error(f"{what}: {path} is larger than {limit} bytes")
    return data


def read_tail(path: Path | str, start: int, limit: int, what: str) -> tuple[bytes, int]:
    """What the regular file at ``path`` holds from ``start`` on, but at most its last ``limit`` bytes, and the
    offset they start at: ``start``, later when more was there (the caller says what it left out), or earlier
    when the file is now shorter than ``start`` (it was truncated: its tail is read again). A FIFO or a device
    (``/dev/zero`` never ends) is refused before anything is read, and opening one never blocks. OSErrors
    (missing file, no permission) are the caller's to word."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block the open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileError(f"{what}: {path} is {_kind(st.st_mode)}, not a regular file",
                            hint="ckit reads only regular files: a device may never end, a FIFO may block")
        at = max(start, st.st_size - limit) if st.st_size >= start else max(0, st.st_size - limit)
        return os.pread(fd, limit, at), at  # at most ``limit`` bytes, also when the file grew meanwhile
    finally:
        os.close(fd)


ALIGN = 4096  # file system block: a copy between equally aligned offsets can share the blocks (a reflink)


def copy_range(src: int, src_at: int, dst: int, dst_at: int, size: int) -> None:
    """``size`` bytes from ``src`` to ``dst`` in the kernel (``copy_file_range``). When both offsets are equally
    aligned, the whole blocks go in a call of their own, which XFS, btrfs and ZFS turn into shared extents (no
    data written); ext4 copies them in the kernel. Through memory when the kernel cannot copy between them."""
    head = min(size, -src_at % ALIGN) if src_at % ALIGN == dst_at % ALIGN else size
    middle = (size - head) // ALIGN * ALIGN
    for at, n in ((0, head), (head, middle), (head + middle, size - head - middle)):
        while n:
            try:
                done = os.copy_file_range(src, dst, n, src_at + at, dst_at + at)
            except OSError:  # another file system, or no support: copy through memory
                data = os.pread(src, min(n, 8 << 20), src_at + at)
                done = len(data)
                view = memoryview(data)
                while view:
                    view = view[os.pwrite(dst, view, dst_at + at + done - len(view)):]
            if done <= 0:
                raise OSError(f"the source ended {n} bytes early while it was copied")
            at, n = at + done, n - done


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range  # dlopen(NULL): the process's own libc
    except (OSError, AttributeError):  # not Linux
        return None
    call.argtypes, call.restype = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint), ctypes.c_int
    return call


def start_writeback(fd: int, offset: int, size: int) -> None:
    """Start sending ``size`` bytes at ``offset`` of ``fd`` to the disk, without waiting for them
    (``sync_file_range(SYNC_FILE_RANGE_WRITE)``; nothing where there is none). Only a head start for the
    ``fsync`` that must follow (and that reports any failure): the disk writes while the rest of the work
    runs, instead of after it."""
    call = _sync_file_range()
    if call is not None and size > 0:
        call(fd, offset, size, 2)  # SYNC_FILE_RANGE_WRITE; ctypes releases the GIL meanwhile


def copy_into(path: Path | str, out: BinaryIO) -> int | None:
    """The file at ``path`` appended to the open file ``out`` in the kernel (:func:`copy_range`); its size, or
    None when ``out`` is not a file (then the caller copies through memory)."""
    try:
        target = out.fileno()
    except (OSError, ValueError):  # a stream without a file
        return None
    out.flush()
    with open(path, "rb") as src:
        size = os.fstat(src.fileno()).st_size
        copy_range(src.fileno(), 0, target, out.tell(), size)
    out.seek(size, os.SEEK_CUR)
    return size
