"""Shell text helpers: every user value reaching a script is quoted here or rejected by a strict pattern."""

from __future__ import annotations

import re
import shlex

from ..errors import ConfigError

SBATCH_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SLURM_TIME = re.compile(r"^(?:([0-9]+)-)?([0-9]+)(?::([0-9]{1,2}))?(?::([0-9]{1,2}))?$")  # \d takes '٣' too
_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def q(value: str) -> str:
    """One literal shell word."""
    return shlex.quote(value)


def q_value(value: str) -> str:
    """A literal assignment value: always single-quoted (``NCCL_IB_HCA==mlx5_0`` would read as a comparison)."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def qv(name: str) -> str:
    """A quoted reference to a shell variable."""
    return f'"${{{name}}}"'


def expand_quote(value: str) -> str:
    """Double-quoted shell text where only ``$NAME``/``${NAME}`` expand (for site values such as ``/scratch/$USER``)."""
    out, pos = ['"'], 0
    for match in _REF.finditer(value):
        out.append(escape_dq(value[pos:match.start()]))
        out.append("${" + (match.group(1) or match.group(2)) + "}")
        pos = match.end()
    out.append(escape_dq(value[pos:]))
    out.append('"')
    return "".join(out)


def escape_dq(text: str) -> str:
    """``text`` as literal content of a double-quoted shell string."""
    return re.sub(r'([\\"$`])', r"\\\1", text)


def check_sbatch_value(flag: str, value: str) -> str:
    """Values that go on an ``#SBATCH`` line, which sbatch parses itself (no shell quoting there)."""
    if not SBATCH_VALUE.fullmatch(value):
        raise ConfigError(f"{flag} {value!r}: only letters, digits and . _ + - are allowed",
                          hint=f"choose a plain {flag.lstrip('-')} such as 'train-1'")
    return value


def time_minutes(value: str, flag: str = "--time") -> int:
    """Minutes of a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)."""
    match = SLURM_TIME.fullmatch(value)
    if not match:
        raise ConfigError(f"{flag} {value!r} is not a Slurm time", hint="use HH:MM:SS or D-HH:MM:SS")
    days, a, b, c = match.groups()
    if days is not None:
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
        return int(days) * 1440 + hours * 60 + minutes + (1 if seconds else 0)
    if c is not None:
        return int(a) * 60 + int(b) + (1 if int(c) else 0)
    if b is not None:
        return int(a) + (1 if int(b) else 0)
    return int(a)
