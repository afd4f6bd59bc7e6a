"""ckit sites detect and ckit doctor against the test Slurm: the detected profile runs a 2-node job unchanged, and
doctor passes every check whose runtime the nodes have (Charliecloud, podman, no runtime) and reports the others
(enroot, Pyxis, SingularityCE, GPUs) as absent, never passed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.integration.registry_helpers import ckit

SITES = Path(__file__).parents[2] / "sites"


def test_a_detected_profile_runs_a_two_node_job_unchanged(slurm: Any, tmp_path: Path) -> None:
    detected = ckit("sites", "detect", "found", "-o", str(tmp_path), "--compare", "local", "--json", cwd=tmp_path)
    assert detected.returncode == 0, detected.stderr
    report = json.loads(detected.stdout)
    assert report["profile"]["partitions"]["multi"]["nodes"] == "n[1-2]"
    assert report["profile"]["facts"]["partitions.multi"]["tag"] == "verified"
    job = ckit("--sites", str(tmp_path), "launch", "--site", "found", "-p", "multi", "-N", "2", "--ntasks-per-node",
               "1", "--submit", "--wait", "--", "sh", "-c", "echo node=$SLURMD_NODENAME", cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    assert sorted(line for line in job.stdout.splitlines() if line.startswith("node=")) == ["node=n1", "node=n2"]


def test_doctor_passes_what_is_there_and_says_what_is_absent(slurm: Any, apptainer: Any, charliecloud: Any,
                                                             busybox_image: str, tmp_path: Path) -> None:
    sites = tmp_path / "sites"
    sites.mkdir()
    shutil.copy(SITES / "local.yaml", sites / "local.yaml")
    ran = ckit("--sites", str(sites), "doctor", "--site", "local", "--image", f"docker-daemon:{busybox_image}",
               "--folder", str(tmp_path / "doctor"), "--json", cwd=tmp_path)
    report = json.loads(ran.stdout)
    status = {r["name"]: r["status"] for r in report["results"]}
    # a failure names the check and its own words first: the whole report is long, and pytest cuts it short
    said = {r["name"]: r for r in report["results"]}
    assert status["job"] == status["two-nodes"] == "passed", (said["job"], said["two-nodes"])
    # every runtime this machine has runs ckit's artifact with two tasks on a node (ch-run --join among them);
    # Debian's `singularity` is Apptainer's alias, and is judged as Apptainer: zstd runs
    for name in ("podman-runs", "charliecloud-runs", "apptainer-runs", "singularity-runs",
                 "apptainer-sif-compression", "singularity-sif-compression"):
        assert status[name] == "passed", said[name]
    for name in ("pyxis-runs", "enroot-import", "pyxis-relative-path", "gpus", "nccl"):
        assert status[name] == "absent", said[name]
    assert status["gloo"] == "skipped"  # busybox has no python3
    assert ran.returncode == (1 if "failed" in status.values() else 0)
    saved = (sites / "local.yaml").read_text()
    assert f"date: '{report['date']}'" in saved and "two-nodes passed" in saved


def test_preflight_stops_a_job_whose_program_is_not_there(slurm: Any, tmp_path: Path) -> None:
    refused = ckit("launch", "--site", "local", "--submit", "--", "build/examples/example-3", cwd=tmp_path)
    assert refused.returncode == 2 and "preflight" in refused.stderr and "Traceback" not in refused.stderr
    assert not list(tmp_path.glob("*.out"))  # nothing was queued
    queued = ckit("launch", "--site", "local", "--no-preflight", "--submit", "--wait", "--", "build/examples/example-3",
                  cwd=tmp_path)
    assert queued.returncode != 0 and "example-3" in (queued.stdout + queued.stderr)
