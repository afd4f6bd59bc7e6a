"""Parse nccl-tests output (all_reduce_perf and friends) into a bus-bandwidth report."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ConfigError

# re.ASCII: \d would take '٣', which int() and float() then read as 3
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+"
                  r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$", re.ASCII)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)", re.ASCII)
_RANK = re.compile(r"^#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$",
                   re.ASCII)


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    type: str
    redop: str
    out_time_us: float
    out_algbw: float
    out_busbw: float
    in_time_us: float
    in_algbw: float
    in_busbw: float


@dataclass(frozen=True)
class NcclReport:
    rows: tuple[Row, ...]
    avg_busbw: float
    ranks: int
    hosts: tuple[str, ...]
    devices: tuple[str, ...]

    @property
    def peak_busbw(self) -> float:
        return max(max(r.out_busbw, r.in_busbw) for r in self.rows)

    def as_json(self) -> dict[str, Any]:
        return {"avg_busbw_gbps": self.avg_busbw, "peak_busbw_gbps": self.peak_busbw, "ranks": self.ranks,
                "hosts": list(self.hosts), "devices": sorted(set(self.devices)), "rows": [asdict(r) for r in self.rows]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NcclReport:
        rows = tuple(Row(**row) for row in data["rows"])
        return cls(rows=rows, avg_busbw=data["avg_busbw_gbps"], ranks=data["ranks"], hosts=tuple(data["hosts"]),
                   devices=tuple(data["devices"]))

    def text(self) -> str:
        out = [f"ranks: {self.ranks} on {len(self.hosts)} node(s): {', '.join(self.hosts)}"]
        if self.devices:
            out.append(f"devices: {', '.join(sorted(set(self.devices)))}")
        out.append(f"{'size (B)':>14} {'type':>6} {'busbw out':>10} {'busbw in':>10}  GB/s")
        out += [f"{r.size_bytes:>14} {r.type:>6} {r.out_busbw:>10.2f} {r.in_busbw:>10.2f}" for r in self.rows]
        out.append(f"average bus bandwidth: {self.avg_busbw:.3f} GB/s (peak {self.peak_busbw:.2f} GB/s)")
        return "\n".join(out) + "\n"


_START = re.compile(r"^#\s*nThread\s")


def _report(lines: list[str], source: str) -> NcclReport:
    rows: list[Row] = []
    avg: float | None = None
    hosts: list[str] = []
    devices: list[str] = []
    ranks = 0
    for line in lines:
        if match := _RANK.match(line):
            ranks += 1
            if match.group(1) not in hosts:
                hosts.append(match.group(1))
            devices.append(match.group(2).strip())
        elif match := _AVG.match(line):
            avg = float(match.group(1))
        elif match := _ROW.match(line):
            g = match.groups()
            rows.append(Row(int(g[0]), int(g[1]), g[2], g[3], float(g[5]), float(g[6]), float(g[7]),
                            float(g[9]), float(g[10]), float(g[11])))
    if not rows or avg is None:
        raise ConfigError(f"{source}: no nccl-tests result table found",
                          hint="give the output of all_reduce_perf (the job's .out file)")
    return NcclReport(rows=tuple(rows), avg_busbw=avg, ranks=ranks, hosts=tuple(hosts), devices=tuple(devices))


def parse_runs(text: str, source: str = "output") -> list[NcclReport]:
    """Every run in ``text`` (each starts at its ``# nThread`` header), one report each, in order."""
    chunks: list[list[str]] = [[]]
    for line in text.splitlines():
        if _START.match(line) and any(_ROW.match(x) or _AVG.match(x) for x in chunks[-1]):
            chunks.append([])
        chunks[-1].append(line)
    reports = [_report(chunk, f"{source} (run {i})") for i, chunk in enumerate(chunks, 1)
               if any(_ROW.match(x) for x in chunk)]
    if not reports:
        raise ConfigError(f"{source}: no nccl-tests result table found",
                          hint="give the output of all_reduce_perf (the job's .out file)")
    return reports


def parse(text: str, source: str = "output") -> NcclReport:
    """The one run in ``text`` (the last one when there are several)."""
    return parse_runs(text, source)[-1]
