"""The limits every read of input is held to: sizes, nesting, network deadlines and retries, in one table.

Each limit has a default and an environment variable that changes it (docs/safety.md). Values are read
when they are used, so a test or a wrapper script can set them per run; a value that is not a number in
range is bad input (exit 2) naming the variable.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import ConfigError
from ..outside import ascii_float, ascii_int

KiB, MiB = 1 << 10, 1 << 20
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Limit:
    env: str
    default: float
    minimum: float
    meaning: str
    integer: bool = True


LIMITS: dict[str, Limit] = {
    # network (registries and token servers)
    "http_timeout": Limit("CKIT_HTTP_TIMEOUT", 60, 0.1, "seconds to connect, and for a whole request with a "
                          "small answer (headers, manifest, token, error) to complete; also each read's "
                          "timeout", integer=False),
    "http_min_speed": Limit("CKIT_HTTP_MIN_SPEED", 16 * KiB, 1, "bytes per second a blob download or upload "
                            "must average over every CKIT_HTTP_TIMEOUT window"),
    "http_retries": Limit("CKIT_HTTP_RETRIES", 4, 0, "retries of a request after 429, 5xx or a broken "
                          "connection (GET/HEAD; other methods after 429/503 only)"),
    "http_retry_wait": Limit("CKIT_HTTP_RETRY_WAIT", 60, 0, "the longest wait before a retry, whatever "
                             "Retry-After says", integer=False),
    "slurm_timeout": Limit("CKIT_SLURM_TIMEOUT", 30, 1, "seconds one Slurm command (squeue, scontrol, sacct, "
                           "scancel, sbatch) may take before ckit stops it and says what to check (SLURM_CONF, "
                           "slurmctld)", integer=False),
    # sizes of what is read into memory
    "pull_piece": Limit("CKIT_PULL_PIECE", 4 * MiB, 64 * KiB, "bytes of one range request when a blob larger "
                        "than two of them is fetched in pieces, several at once (all downloads hold at most eight)"),
    "manifest_size": Limit("CKIT_MAX_MANIFEST_SIZE", 4 * MiB, 1 * KiB, "bytes of a manifest, an image index or "
                           "index.json (registries cap manifests at 4 MiB too)"),
    "config_size": Limit("CKIT_MAX_CONFIG_SIZE", 16 * MiB, 1 * KiB, "bytes of an image config or a docker "
                         "archive's manifest.json"),
    "response_size": Limit("CKIT_MAX_RESPONSE_SIZE", 1 * MiB, 1 * KiB, "bytes of any other registry answer "
                           "(errors, tokens, upload replies)"),
    "file_size": Limit("CKIT_MAX_FILE_SIZE", 4 * MiB, 1 * KiB, "bytes of a recipe, site profile, docker "
                       "config.json or lock file"),
    "tar_header_size": Limit("CKIT_MAX_TAR_HEADER_SIZE", 1 * MiB, 1 * KiB, "bytes of one PAX record set or "
                             "GNU long name in a layer"),
    "log_tail": Limit("CKIT_MAX_LOG_TAIL", 1 * MiB, 1 * KiB, "bytes of a job's log that `ckit logs` shows: its "
                      "end (and with -f, what a poll finds new; the rest is in the file, which the message names)"),
    "yaml_values": Limit("CKIT_MAX_YAML_VALUES", 100_000, 100, "values a YAML file may hold, aliases expanded "
                         "(a 'billion laughs' file is refused)"),
    "nesting": Limit("CKIT_MAX_NESTING", 100, 8, "levels of nesting in a YAML or JSON document"),
    "index_depth": Limit("CKIT_MAX_INDEX_DEPTH", 8, 1, "image indexes nested in indexes"),
    "index_manifests": Limit("CKIT_MAX_INDEX_MANIFESTS", 1000, 1, "manifests reached through one image index"),
}


def get(name: str) -> float:
    """The limit ``name``: its environment variable when set, else the default."""
    limit = LIMITS[name]
    text = os.environ.get(limit.env, "").strip()
    if not text:
        return limit.default
    value = ascii_int(text) if limit.integer else ascii_float(text)  # int()/float() take '٣', '1_0', 'nan'
    if value is None or value < limit.minimum or value > 1e15:
        kind = "a whole number" if limit.integer else "a number"
        raise ConfigError(f"{limit.env}={text!r} is not {kind} of at least {limit.minimum:g}",
                          hint=f"{limit.env}: {limit.meaning}")
    return value


def size(name: str) -> int:
    return int(get(name))


def parse_size(text: str | int, where: str = "max_size") -> int:
    """``500G`` / ``1.5T`` / ``200GiB`` / bytes → bytes (K, M, G, T are powers of 1024)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise ConfigError(f"{where}: {text!r} is not a size", hint="write e.g. 500G, 2T or a number of bytes")
    number, unit = float(match.group(1)), match.group(2).upper()
    return int(number * 1024 ** " KMGT".index(unit or " "))
