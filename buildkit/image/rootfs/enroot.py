"""The files ``enroot import`` adds to an image (enroot's ``docker::configure`` in src/docker.sh), byte for byte.

``/etc/rc`` (the command script enroot and Pyxis run), ``/etc/rc.local``, ``/etc/fstab`` (one bind mount per
volume) and ``/etc/environment`` (the image ENV), plus the WorkingDir directory.

Where enroot mangles input, ckit stays correct instead:

* An ENTRYPOINT/CMD argument containing a newline is split in two by enroot (``readarray``); ckit keeps it
  one argument, quoted ``$'…\\n…'`` exactly as bash's ``${a[@]@Q}`` would quote the intact string.
* An ENV value containing a newline cannot be written to ``/etc/environment`` (one variable per line, no
  escapes); ckit rejects it with a ConvertError naming the variable instead of writing a broken file.
* NUL characters cannot reach a process at all and are rejected; so are a WorkingDir that would need
  escaping inside enroot's double quotes, volumes with whitespace (fstab fields), and newlines in labels'
  comment lines are replaced by spaces as enroot does.
"""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import Iterable

from ...errors import ConvertError
from ..model import ImageConfig, RootfsEntry, When

RC_LOCAL = (
    b"# This file is sourced by /etc/rc when the container starts.\n"
    b"# It can be used to manipulate the entrypoint or the command of the container.\n"
)

_ANSIC = {"\x1b": "\\E", "\a": "\\a", "\v": "\\v", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
          "\t": "\\t", "\\": "\\\\", "'": "\\'"}
_NOT_PRINTABLE = {"Cc", "Cs", "Cn", "Zl", "Zp"}


def _printable(char: str) -> bool:
    """glibc ``iswprint`` in a UTF-8 locale: assigned, not a control, not a line/paragraph separator."""
    return unicodedata.category(char) not in _NOT_PRINTABLE


def bash_quote(value: str) -> str:
    """One word quoted exactly as bash's ``${var@Q}`` does in a UTF-8 locale.

    ``''`` for empty; ``$'…'`` (C escapes, octal for other controls) when any character is not printable;
    a lone ``'`` becomes ``\\'``; otherwise single quotes with ``'`` → ``'\\''``.
    """
    if "\0" in value:
        raise ConvertError(f"argument {value!r} contains a NUL character, which no process can receive")
    if value == "":
        return "''"
    if not all(_printable(c) for c in value):
        out = []
        for char in value:
            if char in _ANSIC:
                out.append(_ANSIC[char])
            elif _printable(char):
                out.append(char)
            else:
                out.extend(f"\\{byte:03o}" for byte in char.encode())
        return "$'" + "".join(out) + "'"
    if value == "'":
        return "\\'"
    return "'" + value.replace("'", "'\\''") + "'"


def bash_quote_all(values: Iterable[str]) -> str:
    """``${array[@]@Q}`` expanded unquoted: the quoted words joined by single spaces."""
    return " ".join(bash_quote(v) for v in values)


def _check_utf8(what: str, value: str) -> None:
    try:
        value.encode()
    except UnicodeEncodeError as err:
        raise ConvertError(f"{what} {value!r} is not valid UTF-8") from err


def _workdir(config: ImageConfig) -> str:
    workdir = config.working_dir or "/"
    _check_utf8("image WorkingDir", workdir)
    bad = sorted({c for c in workdir if c in '"$`\\' or unicodedata.category(c) == "Cc"})
    if bad:
        raise ConvertError(f"image WorkingDir {workdir!r} contains {''.join(bad)!r}, which /etc/rc cannot hold",
                           hint="use a WorkingDir without quotes, $, backquotes, backslashes or control characters")
    if not workdir.startswith("/") or ".." in workdir.split("/"):
        raise ConvertError(f"image WorkingDir {workdir!r} must be an absolute path without '..'")
    return workdir


def rc_text(config: ImageConfig, *, provenance: str) -> str:
    """The ``/etc/rc`` that ``enroot import`` writes for this config. ``provenance`` is the URI enroot records
    for an import it can do itself (``docker://REGISTRY#IMAGE:TAG``); "" writes no provenance line, as for
    sources enroot cannot import (a docker save tar, an OCI layout), whose host path stays private."""
    if any(unicodedata.category(c) == "Cc" for c in provenance):
        raise ConvertError(f"provenance {provenance!r} must be one line")
    lines = [f"# enroot-provenance: {provenance}"] if provenance else []
    for key, value in config.labels:
        _check_utf8("image label", key + value)
        lines.append(f"# {key} {value}".replace("\n", " "))
    workdir = _workdir(config)
    for arg in (*config.entrypoint, *config.cmd):
        _check_utf8("ENTRYPOINT/CMD argument", arg)
    entrypoint = bash_quote_all(config.entrypoint)
    cmd = bash_quote_all(config.cmd if (config.entrypoint or config.cmd) else ("/bin/sh",))
    header = "\n".join(lines) + "\n\n" if lines else ""  # enroot adds the empty line only after a comment
    return header + (
        f'mkdir -p "{workdir}" 2> /dev/null\n'
        f'cd "{workdir}" && unset OLDPWD || exit 1\n'
        "\n"
        "if [ -s /etc/rc.local ]; then\n"
        "    . /etc/rc.local\n"
        "fi\n"
        "\n"
        "if [ $# -gt 0 ]; then\n"
        f'    exec {entrypoint} "$@"\n'
        "else\n"
        f"    exec {entrypoint} {cmd}\n"
        "fi\n"
    )


def fstab_text(config: ImageConfig) -> str:
    """One ``x-create=dir`` bind line per volume, sorted; empty without volumes."""
    for volume in config.volumes:
        if not volume or any(c.isspace() or unicodedata.category(c) == "Cc" for c in volume):
            raise ConvertError(f"image volume {volume!r} cannot be written to /etc/fstab (whitespace in a path)",
                               hint="rename the volume path in the image config")
        if not volume.startswith("/") or ".." in volume.split("/"):
            # ${ENROOT_ROOTFS}/a/../../x (or ${ENROOT_ROOTFS}x) names a host path outside the container's root
            raise ConvertError(f"image volume {volume!r} must be an absolute path without '..': its /etc/fstab "
                               "bind would reach outside the container", hint="fix the volume path in the image")
    return "".join(f"${{ENROOT_ROOTFS}}{v} {v} none x-create=dir,bind,rw,nosuid,nodev\n"
                   for v in sorted(config.volumes))


def environment_text(config: ImageConfig) -> str:
    """The image ENV, one entry per line, verbatim (enroot substitutes ``${VAR}`` from the host at start)."""
    for entry in config.env:
        _check_utf8("image ENV entry", entry)
        if "\n" in entry or "\r" in entry or "\0" in entry:
            name = entry.split("=", 1)[0]
            raise ConvertError(f"image ENV variable {name!r} has a value with a line break or NUL, which "
                               "/etc/environment cannot hold (enroot would split it)",
                               hint=f"remove the line break from {name} in the image, e.g. with `ENV {name}=…`")
    return "".join(f"{entry}\n" for entry in config.env)


def _dirs(path: str) -> list[RootfsEntry]:
    parts = [p for p in posixpath.normpath(path).split("/") if p]
    return [RootfsEntry("/" + "/".join(parts[:i]), "dir", 0o755, when=When.IF_ABSENT)
            for i in range(1, len(parts) + 1)]


def entries(config: ImageConfig, *, provenance: str) -> list[RootfsEntry]:
    """Everything ``enroot import`` adds on top of the flattened image, in write order."""
    rc = rc_text(config, provenance=provenance).encode()
    workdirs = [d for d in _dirs(_workdir(config)) if d.path != "/etc"]
    return [
        RootfsEntry("/etc", "dir", 0o755, when=When.IF_ABSENT),
        *workdirs,
        RootfsEntry("/etc/fstab", "file", 0o644, fstab_text(config).encode()),
        RootfsEntry("/etc/environment", "file", 0o644, environment_text(config).encode()),
        RootfsEntry("/etc/rc", "file", 0o644, rc),
        RootfsEntry("/etc/rc.local", "file", 0o644, RC_LOCAL),
    ]
