"""What the Singularity and Apptainer versions a site declares read: the squashfs compressions inside a ``.sif`` and
the SIF layer media types their ``pull oras://`` finds. Read in their sources (SingularityCE v3.4.2 … main,
Apptainer v1.0 … main); SingularityCE 3.4.2 is also run by the tests.

* Squashfs in a SIF: every SingularityCE (and the Singularity 3.x it forked from) checks the partition's superblock
  in user space before it mounts anything (``pkg/image/squashfs.go`` CheckSquashfsHeader) and knows gzip, lzma,
  lzo, xz and lz4 only: a zstd partition fails with ``unknown compression algorithm value 6``, whatever the kernel
  could mount. Apptainer knows zstd from 1.4.0.
* ORAS: ``pull oras://`` of SingularityCE before 3.7 looks only for the layer type Singularity used first
  (``appliciation/vnd.sylabs.sif.layer.tar``, misspelt as it is) and otherwise says "no layer found corresponding
  to SIF image"; 3.7 and newer, and every Apptainer, take it and the v1 type they push themselves.

A version is the oldest a job on the site may run (``3.4.2``, ``3.11``, ``3.x``); without one ckit assumes the
oldest of the kind that runs a SIF at all (singularity 3.0, apptainer 1.0), so what it writes runs on any.
"""

from __future__ import annotations

import re

SIF_LAYER_V1 = "application/vnd.sylabs.sif.layer.v1.sif"
SIF_LAYER_PROTO = "appliciation/vnd.sylabs.sif.layer.tar"  # sic: the first type, which every version pulls

Version = tuple[int, int, int]
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){0,2}(\.x)?$"
OLDEST_SIF_RUNTIME: dict[str, Version] = {"singularity": (3, 0, 0), "apptainer": (1, 0, 0)}
_SINGULARITY_READS = ("gzip", "lzma", "lzo", "xz", "lz4")  # CheckSquashfsHeader, SingularityCE 3.x to main
_ZSTD_FROM_APPTAINER: Version = (1, 4, 0)
_V1_LAYER_FROM_SINGULARITY: Version = (3, 7, 0)


def parse_version(text: str) -> Version:
    """The oldest version ``text`` admits: ``3.x`` and ``3`` are 3.0.0, ``3.11`` is 3.11.0."""
    if not re.fullmatch(VERSION_PATTERN, text):
        raise ValueError(f"not a version: {text!r}")
    parts = [int(p) for p in text.removesuffix(".x").split(".")] + [0, 0]
    return parts[0], parts[1], parts[2]


def runs_sif(kind: str) -> bool:
    return kind in OLDEST_SIF_RUNTIME


def oldest(kind: str, version: str | None) -> Version:
    """The version ckit writes for: the declared one, else the oldest of the kind that runs a SIF."""
    return parse_version(version) if version else OLDEST_SIF_RUNTIME[kind]


def sif_reads(kind: str, version: str | None) -> tuple[str, ...]:
    """The squashfs compressions a SIF runtime of ``kind`` from ``version`` on reads in a ``.sif``."""
    if kind == "apptainer" and oldest(kind, version) >= _ZSTD_FROM_APPTAINER:
        return (*_SINGULARITY_READS, "zstd")
    return _SINGULARITY_READS


def pulls_v1_layer(kind: str, version: str | None) -> bool:
    """Whether ``pull oras://`` of this runtime finds a SIF pushed with the v1 layer type."""
    return kind == "apptainer" or oldest(kind, version) >= _V1_LAYER_FROM_SINGULARITY


def label(kind: str, version: str | None) -> str:
    """``singularity 3.x`` / ``apptainer >= 1.4`` / ``singularity (any version)``."""
    if not version:
        return f"{kind} (version not given: any)"
    return f"{kind} {version}" if version.endswith(".x") or version.count(".") == 2 else f"{kind} >= {version}"


# Pyxis, read in NVIDIA/pyxis v0.20.0 … v0.24.0 (config.c, pyxis_slurmstepd.c): importer= came with 0.21 and
# use_squashfuse=1 with 0.22, which starts an unnamed step without --container-save straight from a squashfs
# path; from what an importer printed only from 0.24 (0.22 and 0.23 still `enroot create` it).
PYXIS_OPTION_FROM: dict[str, Version] = {"importer": (0, 21, 0), "squashfuse": (0, 22, 0)}
_PLUGSTACK_WORD = {"importer": "importer=", "squashfuse": "use_squashfuse=1"}
_PYXIS_IMPORTER_DIRECT_FROM: Version = (0, 24, 0)


def pyxis_lacks(option: str, version: str | None) -> str | None:
    """Why a Pyxis of ``version`` (the oldest on the site) has no plugstack ``option``; None when it has it."""
    needed = PYXIS_OPTION_FROM[option]
    if version and parse_version(version) >= needed:
        return None
    shown = f"Pyxis {version}" if version else "a Pyxis of no stated version"
    return f"{shown} has no {_PLUGSTACK_WORD[option]} (it came with Pyxis {'.'.join(map(str, needed[:2]))})"


def pyxis_starts_from_importer(version: str | None) -> bool:
    """Whether use_squashfuse=1 also starts an unnamed step straight from the file an importer printed."""
    return bool(version) and parse_version(version or "0") >= _PYXIS_IMPORTER_DIRECT_FROM
