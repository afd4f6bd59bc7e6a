"""Slurm's answers as data: ``scontrol show … -o`` records, ``scontrol show config``, GRES strings, memory and time
values, ``srun --mpi=list`` and ``sacctmgr -nP``. One reader per form; pure (tests feed them real outputs)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..outside import ascii_int

# a key starts a field only after whitespace: values such as OS=Linux 6.1.0 #1 SMP … hold spaces but no " Key="
_FIELD = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
_UNSET = ("", "(null)", "N/A", "NONE", "n/a")


def records(text: str) -> list[dict[str, str]]:
    """One dict per line of ``scontrol -o show partition|node``: ``Key=value`` fields, values taken to the next key."""
    found = []
    for line in text.splitlines():
        matches = list(_FIELD.finditer(line))
        if not matches or matches[0].start() != len(line) - len(line.lstrip()):
            continue  # not a record (an error line, "No partitions in the system")
        record = {}
        for index, match in enumerate(matches):
            end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
            record[match.group(1)] = line[match.end():end].strip()
        found.append(record)
    return found


def config(text: str) -> dict[str, str]:
    """``scontrol show config``: its ``Key = value`` lines (headers and blank lines skipped)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key.strip()):
            out[key.strip()] = value.strip()
    return out


def value(record: dict[str, str], key: str) -> str | None:
    """A field, None when Slurm says it is unset ((null), N/A, NONE)."""
    text = record.get(key, "")
    return None if text in _UNSET else text


@dataclass(frozen=True)
class Gres:
    """The GPUs of one node's ``Gres=`` (``gpu:a100:4(S:0-1),mps:100``): how many and of which type."""

    count: int
    type: str | None


def gpus(gres: str | None) -> Gres:
    """The GPUs a ``Gres=`` string names; a node with no gpu GRES has ``Gres(0, None)``."""
    count, types = 0, []
    for item in re.split(r",(?![^(]*\))", gres or ""):
        parts = re.sub(r"\(.*\)$", "", item.strip()).split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        number = ascii_int(parts[-1])
        count += number if number is not None else 0
        if len(parts) >= 3:
            types.append(parts[1])
    kinds = sorted(set(types))
    return Gres(count, kinds[0] if len(kinds) == 1 else None)


def memory_mb(text: str | None) -> int | None:
    """``RealMemory=`` in MB; None for Slurm's default of 1 (the node's memory was not configured) or no number."""
    number = ascii_int(text or "")
    return number if number is not None and number > 1 else None


def max_time(text: str | None) -> str | None:
    """``MaxTime=`` in the profile's form; None for UNLIMITED/INFINITE (no limit)."""
    if not text or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    return text if re.fullmatch(r"([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}", text) else None


def hostlist(names: list[str]) -> str:
    """Node names as one hostlist expression: ``n1,n2`` → ``n[1-2]`` when they share a prefix, else joined."""
    split = [re.fullmatch(r"(.*?)([0-9]+)", name) for name in names]
    if len(names) > 1 and all(split):
        prefixes = {m.group(1) for m in split if m}
        widths = {len(m.group(2)) for m in split if m}
        numbers = sorted(int(m.group(2)) for m in split if m)
        if len(prefixes) == 1 and len(widths) == 1 and numbers == list(range(numbers[0], numbers[-1] + 1)):
            width = widths.pop()
            return f"{prefixes.pop()}[{numbers[0]:0{width}d}-{numbers[-1]:0{width}d}]"
    return ",".join(names)


def mpi_plugins(text: str) -> tuple[str, ...]:
    """``srun --mpi=list``: the plugin names (22.05 prints them indented under "MPI plugin types are...";
    23.02 and newer as "srun: pmi2" lines)."""
    names = []
    for line in text.splitlines():
        word = line.strip().removeprefix("srun:").strip()
        if re.fullmatch(r"[a-z][a-z0-9_]*", word) and word not in ("none",):
            names.append(word)
    return tuple(dict.fromkeys(names))


def associations(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """``sacctmgr -nP show assoc user=U format=Account,QOS``: (account, its QOS names) per line."""
    out = []
    for line in text.splitlines():
        account, sep, qos = line.strip().partition("|")
        if sep and account:
            out.append((account, tuple(q for q in qos.split(",") if q)))
    return out


def test_only_refusal(stderr: str) -> str | None:
    """What ``sbatch --test-only`` without --account/--comment refused, from its error: "account", "comment" or
    None (it would have run, or it failed for another reason)."""
    text = stderr.lower()
    if "error" not in text:
        return None
    if "account" in text:
        return "account"
    if "comment" in text:
        return "comment"
    return None
