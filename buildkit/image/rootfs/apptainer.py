"""What apptainer adds to the rootfs of a docker-derived SIF (apptainer's build sources: base environment, runscript, env and labels).

Pure: every function returns text or :class:`RootfsEntry` values; the converter writes them into the
squashfs. The runscript and ``10-docker2singularity.sh`` follow apptainer's quoting rules exactly, so a
ckit SIF behaves like one built by ``apptainer build x.sif docker://…``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from ...errors import ConvertError
from ..model import ImageConfig, RootfsEntry, When
from .apptainer_scripts import FIXED_SCRIPTS
from .gotemplate import render

log = logging.getLogger("ckit.image")

_ENV_NAME = re.compile(r"^[a-zA-Z_]{1,}[a-zA-Z0-9_]{0,}$")

DIRS = (".singularity.d", ".singularity.d/libs", ".singularity.d/actions", ".singularity.d/env", "dev", "proc",
        "root", "var", "var/tmp", "tmp", "etc", "sys", "home")
SYMLINKS = (("singularity", ".singularity.d/runscript"), (".run", ".singularity.d/actions/run"),
            (".exec", ".singularity.d/actions/exec"), (".test", ".singularity.d/actions/test"),
            (".shell", ".singularity.d/actions/shell"), ("environment", ".singularity.d/env/90-environment.sh"))

# The OCI runscript template (Go text/template syntax, rendered by .gotemplate with the same whitespace rules).
RUNSCRIPT_TEMPLATE = """
# When SINGULARITY_NO_EVAL set, use OCI compatible behavior that does
# not evaluate resolved CMD / ENTRYPOINT / ARGS through the shell, and
# does not modify expected quoting behavior of args.
if [ -n "$SINGULARITY_NO_EVAL" ]; then
    # ENTRYPOINT only - run entrypoint plus args
    if [ -z "$OCI_CMD" ] && [ -n "$OCI_ENTRYPOINT" ]; then
        {{ .PrependEntrypoint }}
        exec "$@"
    fi

    # CMD only - run CMD or override with args
    if [ -n "$OCI_CMD" ] && [ -z "$OCI_ENTRYPOINT" ]; then
        {{- if .PrependCmd }}
        if [ $# -eq 0 ]; then
            {{ .PrependCmd }}
        fi
        {{- end }}
        exec "$@"
    fi

    # ENTRYPOINT and CMD - run ENTRYPOINT with CMD as default args
    # override with user provided args
    {{- if .PrependEntrypoint }}
    if [ $# -gt 0 ]; then
        {{ .PrependEntrypoint }}
\telse
        {{ .PrependCmd }}
        {{ .PrependEntrypoint }}
    fi
\t{{- else if .PrependCmd }}
    if [ $# -eq 0 ]; then
        {{ .PrependCmd }}
    fi
    {{- end }}
    exec "$@"
fi

# Standard Apptainer behavior evaluates CMD / ENTRYPOINT / ARGS
# combination through shell before exec, and requires special quoting
# due to concatenation of CMDLINE_ARGS.
CMDLINE_ARGS=""
# prepare command line arguments for evaluation
for arg in "$@"; do
        CMDLINE_ARGS="${CMDLINE_ARGS} \\"$arg\\""
done

# ENTRYPOINT only - run entrypoint plus args
if [ -z "$OCI_CMD" ] && [ -n "$OCI_ENTRYPOINT" ]; then
    if [ $# -gt 0 ]; then
        SINGULARITY_OCI_RUN="${OCI_ENTRYPOINT} ${CMDLINE_ARGS}"
    else
        SINGULARITY_OCI_RUN="${OCI_ENTRYPOINT}"
    fi
fi

# CMD only - run CMD or override with args
if [ -n "$OCI_CMD" ] && [ -z "$OCI_ENTRYPOINT" ]; then
    if [ $# -gt 0 ]; then
        SINGULARITY_OCI_RUN="${CMDLINE_ARGS}"
    else
        SINGULARITY_OCI_RUN="${OCI_CMD}"
    fi
fi

# ENTRYPOINT and CMD - run ENTRYPOINT with CMD as default args
# override with user provided args
if [ $# -gt 0 ]; then
    SINGULARITY_OCI_RUN="${OCI_ENTRYPOINT} ${CMDLINE_ARGS}"
else
    SINGULARITY_OCI_RUN="${OCI_ENTRYPOINT} ${OCI_CMD}"
fi

# Evaluate shell expressions first and set arguments accordingly,
# then execute final command as first container process
eval "set ${SINGULARITY_OCI_RUN}"
exec "$@"
"""


# --- apptainer's shell quoting (internal/pkg/util/shell/escape.go semantics) ----------------------------------
def escape(value: str) -> str:
    """Escape for the inside of double quotes: ``\\`` first, then ``"``, backquote and ``$``."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")


def escape_single_quotes(value: str) -> str:
    """Escape for the inside of single quotes: ``'`` → ``'"'"'``."""
    return value.replace("'", "'\"'\"'")


def args_quoted(args: tuple[str, ...] | list[str]) -> str:
    """Each argument in double quotes (escaped), joined by one space."""
    return " ".join(f'"{escape(a)}"' for a in args)


def prepend_lines(args: tuple[str, ...]) -> str:
    """``set -- 'ARG' "$@"`` lines, last argument first, so that running them prepends ``args`` to ``$@``."""
    return "".join(f"set -- '{escape_single_quotes(a)}' \"$@\"\n" for a in reversed(args))


def _check_shell_safe(what: str, values: tuple[str, ...]) -> None:
    for value in values:
        if "\0" in value:
            raise ConvertError(f"{what} {value!r} contains a NUL character, which no shell can hold")
        try:
            value.encode()
        except UnicodeEncodeError as err:
            raise ConvertError(f"{what} {value!r} is not valid UTF-8") from err


def runscript(config: ImageConfig) -> str:
    """``/.singularity.d/runscript`` for an image's ENTRYPOINT and CMD."""
    _check_shell_safe("ENTRYPOINT/CMD argument", config.entrypoint + config.cmd)
    entrypoint = escape_single_quotes(args_quoted(config.entrypoint)) if config.entrypoint else ""
    cmd = escape_single_quotes(args_quoted(config.cmd)) if config.cmd else ""
    body = render(RUNSCRIPT_TEMPLATE, {"PrependCmd": prepend_lines(config.cmd),
                                       "PrependEntrypoint": prepend_lines(config.entrypoint)})
    return f"#!/bin/sh\nOCI_ENTRYPOINT='{entrypoint}'\nOCI_CMD='{cmd}'\n{body}"


def docker_env_script(config: ImageConfig) -> str:
    """``10-docker2singularity.sh``: image ENV as defaults the host can override, PATH forced."""
    lines = ["#!/bin/sh\n"]
    for entry in config.env:
        name, sep, value = entry.partition("=")
        if not _ENV_NAME.fullmatch(name):  # fullmatch: "$" alone would accept "FOO\n"
            log.warning("image ENV entry %r skipped: %r is not a valid variable name", entry, name)
            continue
        _check_shell_safe(f"image ENV variable {name}", (value,))
        if not sep:
            lines.append(f'export {name}="${{{name}:-}}"\n')
        elif name == "PATH":
            lines.append(f'export PATH="{escape(value)}"\n')
        else:
            lines.append(f'export {name}="${{{name}:-"{escape(value)}"}}"\n')
    return "".join(lines)


# --- JSON the Go way ------------------------------------------------------------------------------------------
def go_json(value: Any, *, indent: str | None = None) -> str:
    """``json.Marshal``/``MarshalIndent`` output: sorted map keys, HTML-safe escapes, UTF-8 kept."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, indent=indent,
                      separators=(",", ": ") if indent is not None else (",", ":"))
    for char, code in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                       ("\u2029", "\\u2029")):
        text = text.replace(char, code)
    return text


_OCI_CONFIG_FIELDS = (
    ("AttachStderr", bool), ("AttachStdin", bool), ("AttachStdout", bool), ("Cmd", list), ("Healthcheck", dict),
    ("Domainname", str), ("Entrypoint", list), ("Env", list), ("Hostname", str), ("Image", str),
    ("Labels", dict), ("OnBuild", list), ("OpenStdin", bool), ("StdinOnce", bool), ("Tty", bool), ("User", str),
    ("Volumes", dict), ("WorkingDir", str), ("ExposedPorts", dict), ("ArgsEscaped", bool),
    ("NetworkDisabled", bool), ("MacAddress", str), ("StopSignal", str), ("Shell", list),
)
_HEALTH_FIELDS = ("Test", "Interval", "Timeout", "StartPeriod", "Retries")


class _Raw(str):
    """Already-encoded JSON text."""


def _lookup(raw: Mapping[str, Any], name: str) -> Any:
    """Go's case-insensitive field matching: exact name first, then any case."""
    if name in raw:
        return raw[name]
    return next((v for k, v in raw.items() if k.lower() == name.lower()), None)


def oci_config_json(config: ImageConfig) -> bytes:
    """``json.Marshal(v1.Config)`` of go-containerregistry: field order, omitempty, unknown keys dropped."""
    out: dict[str, Any] = {}
    for name, kind in _OCI_CONFIG_FIELDS:
        found = _lookup(config.raw, name)
        if not found or not isinstance(found, kind):
            continue
        value: Any = found  # a JSON value of the field's kind
        if name == "Healthcheck":
            fields = [f"{go_json(k)}:{go_json(_lookup(value, k))}" for k in _HEALTH_FIELDS if _lookup(value, k)]
            out[name] = _Raw("{" + ",".join(fields) + "}")
            continue
        elif name in ("Volumes", "ExposedPorts"):
            value = {k: {} for k in sorted(value)}
        elif name == "Labels":
            value = {k: str(v) for k, v in sorted(value.items())}
        out[name] = value
    parts = [f"{go_json(k)}:{v if isinstance(v, _Raw) else go_json(v)}" for k, v in out.items()]
    return ("{" + ",".join(parts) + "}").encode()


# --- labels -------------------------------------------------------------------------------------------------
def deffile_header(deffile: str) -> dict[str, str]:
    """``key: value`` header lines of a definition file (up to the first section), keys lower-cased."""
    header: dict[str, str] = {}
    for line in deffile.splitlines():
        if line.lstrip().startswith("%"):
            break
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            header[key.strip().lower()] = value.strip()
    return header


def build_labels(config: ImageConfig, *, deffile: str, source_date_epoch: int | None) -> dict[str, str]:
    """The labels apptainer's build adds (``addBuildLabels``), dated by SOURCE_DATE_EPOCH when given."""
    stamp = dt.datetime.fromtimestamp(time.time() if source_date_epoch is None else source_date_epoch, dt.UTC)
    labels = {
        "org.label-schema.schema-version": "1.0",
        "org.opencontainers.image.created": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.label-schema.build-date": (f"{stamp:%A}_{stamp.day}_{stamp:%B}_{stamp.year}_"
                                        f"{stamp.hour:02d}:{stamp.minute}:{stamp.second}_UTC"),
        "org.opencontainers.image.architecture": config.architecture,
        "org.label-schema.build-arch": config.architecture,
    }
    for key, value in deffile_header(deffile).items():
        labels[f"org.label-schema.usage.singularity.deffile.{key}"] = value
    return labels


def labels_json(config: ImageConfig, *, deffile: str, labels_extra: Mapping[str, str] = {},
                source_date_epoch: int | None = None) -> bytes:
    """``/.singularity.d/labels.json``: image labels, then build labels, then ``labels_extra`` (later wins)."""
    merged = dict(config.labels)
    merged.update(build_labels(config, deffile=deffile, source_date_epoch=source_date_epoch))
    merged.update(labels_extra)
    return go_json(merged, indent="\t").encode()


# --- the whole set ------------------------------------------------------------------------------------------
def entries(config: ImageConfig, *, deffile: str, labels_extra: Mapping[str, str] = {},
            source_date_epoch: int | None = None) -> list[RootfsEntry]:
    """Every directory, symlink and file apptainer adds to a docker-derived rootfs, in write order."""
    out = [RootfsEntry(f"/{d}", "dir", 0o755, when=When.IF_ABSENT) for d in DIRS]
    out += [RootfsEntry(f"/{link}", "symlink", 0o777, target=target, when=When.UNLESS_REGULAR)
            for link, target in SYMLINKS]
    out += [RootfsEntry("/etc/hosts", "file", 0o644), RootfsEntry("/etc/resolv.conf", "file", 0o644)]
    out += [RootfsEntry(f"/.singularity.d/{path}", "file", 0o755, text.encode())
            for path, text in FIXED_SCRIPTS.items()]
    out += [
        RootfsEntry("/.singularity.d/runscript", "file", 0o755, runscript(config).encode()),
        RootfsEntry("/.singularity.d/env/10-docker2singularity.sh", "file", 0o755,
                    docker_env_script(config).encode()),
        RootfsEntry("/.singularity.d/env/94-appsbase.sh", "file", 0o755, b""),
        RootfsEntry("/.singularity.d/labels.json", "file", 0o644,
                    labels_json(config, deffile=deffile, labels_extra=labels_extra,
                                source_date_epoch=source_date_epoch)),
        RootfsEntry("/.singularity.d/Singularity", "file", 0o644, deffile.encode()),
    ]
    return out
