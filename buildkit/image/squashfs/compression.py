"""Squashfs compression: the choice of algorithm and level, by target and site.

ckit writes squashfs itself (:mod:`.writer`) straight from the merged layer index: no tar stream,
no subprocess, no root, nothing unpacked on the host. On the 345 MB bench image it takes about the time
``mksquashfs`` needs for the already flattened tree at the same settings, reading and merging the layers
included. Its superblock time is 0, or ``SOURCE_DATE_EPOCH`` when set, so the output is reproducible.

Compression ``ALGO[:LEVEL]``: gzip, zstd, lz4 or xz. Without ``--compress`` a ``.sif`` gets ``gzip:1``, which
every Singularity and Apptainer reads (SingularityCE refuses a zstd partition whatever its version, Apptainer before
1.4 too), unless the ``--site`` runs only versions that read zstd (then ``zstd:1``); a ``.sqsh`` gets zstd's fast
mode ``zstd:-3``, or ``gzip:1`` on a site whose kernel cannot mount zstd (see PREFERENCE and PORTABLE), and
``lz4:1`` on a site whose Pyxis starts jobs straight from the file with squashfuse (SQUASHFUSE). Without a
level ckit uses the target's level for that algorithm (``zstd`` is zstd:-3 for a ``.sqsh``, zstd:1 for a
``.sif``), else its fast level, never gzip's level 9 unless asked for. lzo is not written: zstd's fast modes are
as fast here and smaller, and gzip:1 is what kernels and runtimes without zstd read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import ConfigError
from ...outside import ascii_int

if TYPE_CHECKING:
    from ...site.model import Site

LEVELS = {"gzip": (1, 9), "zstd": (-7, 22), "xz": (0, 9), "lz4": (1, 12)}  # zstd < 0: its "--fast" modes
FAST_LEVEL = {"gzip": 1, "zstd": 1, "xz": 0, "lz4": 1}  # lz4:1 is LZ4's default mode, 2 to 12 LZ4 HC
# The default per target, then what a site that cannot mount zstd gets: the fast end of gzip, which every
# kernel mounts. A .sif is mounted and copied around: zstd:1, as small as gzip level 9 within 10%. A .sqsh is
# unpacked by enroot on every node of every job, and enroot's own default stores file data uncompressed
# for speed: zstd's fast mode keeps that priority and still writes fewer bytes (0.59-0.68x of enroot's default).
PREFERENCE = {"sif": ("zstd:1", "gzip:1", "xz:0"), "sqsh": ("zstd:-3", "gzip:1", "xz:0")}
# A .sqsh that Pyxis starts straight from (use_squashfuse=1) is read through squashfuse for the job's whole life, one
# block at a time: there decompression speed is what counts. Measured with Debian's squashfuse 0.1.105 on the 1.4 GB
# torch image (the retired bench_ttfs.py, 2026-11-27, docs/benchmarks.md; every file read once): lz4 reads it 1.1-3.1x faster than zstd:-3
# (squashfuse sets up a zstd context for every block), gzip:1 and uncompressed blocks are slower still, and lz4:1
# is within a few per cent of zstd:-3's size and as fast to write. So a site whose profile says squashfuse gets lz4:1.
SQUASHFUSE = ("lz4:1", "zstd:-3", "gzip:1", "xz:0")
ALGORITHMS = ("gzip", "zstd", "xz", "lz4")
# What a default artifact for no site in particular may use: a .sif must run on every Singularity and Apptainer
# (no zstd: see buildkit.site.compat); every runtime of a .sqsh (enroot's unsquashfs, squashfuse) reads zstd.
PORTABLE = {"sif": ("gzip", "xz"), "sqsh": ALGORITHMS}
ACCEPTED = "gzip[:1-9], zstd[:-7..-1 or 1-22], lz4[:1-12], xz[:0-9]"


@dataclass(frozen=True)
class Compression:
    algo: str
    level: int

    @property
    def label(self) -> str:
        return f"{self.algo}:{self.level}"


def default_level(algo: str, target: str | None) -> int:
    """The level an algorithm named without one gets: the target's own choice for it (zstd -> -3 for a
    .sqsh, 1 for a .sif), else the algorithm's fast level."""
    for candidate in PREFERENCE.get(target or "", ()):
        name, _, level = candidate.partition(":")
        if name == algo:
            return int(level)
    return FAST_LEVEL[algo]


def parse_compression(text: str, target: str | None = None) -> Compression:
    """``ALGO[:LEVEL]`` → Compression, or a ConfigError naming what is accepted; without a level, the
    ``target``'s default level for that algorithm."""
    algo, _, level_text = text.strip().lower().partition(":")
    if algo == "lzo":
        raise ConfigError(f"--compress {text!r}: ckit does not write {algo} squashfs",
                          hint="zstd:1 is as fast here and smaller; gzip:1 suits kernels without zstd")
    if algo not in ALGORITHMS:
        raise ConfigError(f"--compress {text!r}: unknown algorithm {algo!r}", hint=f"use one of {ACCEPTED}")
    if not level_text:
        return Compression(algo, default_level(algo, target))
    low, high = LEVELS[algo]
    level = ascii_int(level_text, signed=True)  # not isdigit(): it takes '٣', which int() reads as 3
    if level is None or not low <= level <= high or (algo == "zstd" and level == 0):
        allowed = "-7..-1 or 1..22" if algo == "zstd" else f"{low}..{high}"
        raise ConfigError(f"--compress {text!r}: level must be {allowed} for {algo}", hint=f"use one of {ACCEPTED}")
    return Compression(algo, level)


def choose(requested: str | None, allowed: Sequence[str] = (), *, target: str = "sif",
           site_name: str = "", squashfuse: bool = False) -> Compression:
    """The user's choice (checked against the site), else the first of the target's PREFERENCE (SQUASHFUSE for a
    .sqsh that Pyxis reads through squashfuse) the site can mount; with no rule (``allowed`` empty), the first
    that runs anywhere (PORTABLE)."""
    if requested:
        chosen = parse_compression(requested, target)
        if allowed and chosen.algo not in allowed:
            raise ConfigError(f"--compress {requested}: site {site_name} cannot mount {chosen.algo} squashfs",
                              hint=f"the site's runtime mounts: {', '.join(allowed)}")
        return chosen
    for candidate in SQUASHFUSE if squashfuse and target == "sqsh" else PREFERENCE[target]:
        chosen = parse_compression(candidate)
        if chosen.algo in (allowed or PORTABLE[target]):
            return chosen
    raise ConfigError(f"site {site_name}: none of its squashfs compressions ({', '.join(allowed)}) is written by ckit",
                      hint="list gzip, zstd, lz4 or xz in the site profile (ckit does not write lzo or lzma)")


def choose_for(requested: str | None, site: Site | None, target: str) -> Compression:
    """:func:`choose` by the site's rules (its kernel, and its runtime's version for a .sif); a ``--compress``
    the site cannot run is refused with the rule that forbids it."""
    if site is None:
        return choose(requested, target=target)
    if requested:
        chosen = parse_compression(requested, target)
        why = site.refusal(target, chosen.algo)
        if why:
            raise ConfigError(f"--compress {requested}: a {chosen.algo} .{target} does not run on {site.name}: {why}",
                              hint=f"use {' or '.join(site.compressions(target))}, or leave --compress out: "
                                   f"ckit then picks one {site.name} runs")
        return chosen
    return choose(None, site.compressions(target), target=target, site_name=site.name,
                  squashfuse=site.reads_through_squashfuse())
