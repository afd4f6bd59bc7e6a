"""``ckit launch`` and ``ckit nccl-report`` through the CLI (no process is started here)."""

from __future__ import annotations

import json

from buildkit.cli import main
from tests.testdata import all_reduce_1node, all_reduce_2nodes


def test_dry_run_prints_the_script(capsys):
    rc = main(["launch", "--site", "local", "--framework", "ddp", "--tasks-per-node", "2", "--dry-run", "--",
               "python3", "train.py", "--lr", "0.1"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("#!/bin/bash\n#SBATCH --job-name=ckit\n#SBATCH --partition=debug\n")
    assert out.rstrip().endswith("ckit-task python3 train.py --lr 0.1")


def test_dry_run_json(capsys):
    rc = main(["launch", "--site", "oci", "--image", "nvcr.io/nvidia/pytorch:24.06-py3", "--dry-run", "--json",
               "--", "python", "x.py"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["site"] == "oci" and "--container-image=" in data["text"] and data["script"] is None
    assert data["warnings"] and "ckit stage" in data["warnings"][0]


def test_policy_violation_exits_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["launch", "--site", "twnia2", "--image", "/x.sif", "-o", "job.sbatch", "--", "python", "x.py"])
    assert rc == 2 and "twnia2 requires --account" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_writes_the_script_without_sbatch_on_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    rc = main(["launch", "--site", "local", "--script", "sub/job.sbatch", "--json", "--", "echo", "hi"])
    data = json.loads(capsys.readouterr().out)
    script = tmp_path / "sub" / "job.sbatch"
    assert rc == 0 and (data["site"], data["script"], data["job_id"]) == ("local", str(script), None)
    assert script.read_text().rstrip().endswith("srun --kill-on-bad-exit=1 --export=ALL echo hi") and script.stat().st_mode & 0o111
    assert [p.name for p in script.parent.iterdir()] == ["job.sbatch"]


def test_wait_needs_submit(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["launch", "--site", "local", "--wait", "--", "true"]) == 2


def test_apulis_prints_the_form_and_writes_the_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["launch", "--site", "apulis", "--image", "apulistech/mindspore:0.3.0-withtools", "--framework",
               "mindspore", "--nodes", "2", "--devices-per-node", "8", "--rank-table", "legacy", "--", "python",
               "train.py"])
    captured = capsys.readouterr()
    assert rc == 0 and "Device Type: huawei_npu_arm64" in captured.out
    assert "--- file /home/${DLWS_USER_NAME}/ckit/ckit/launch-npu.sh" in captured.out
    written = tmp_path / "ckit-apulis" / "launch-npu.sh"
    assert written.read_text() in captured.out
    assert f"wrote {written}: copy it to /home/${{DLWS_USER_NAME}}/ckit/ckit/launch-npu.sh" in captured.err


def test_unsupported_framework_on_apulis(capsys):
    rc = main(["launch", "--site", "apulis", "--image", "x/y:1", "--framework", "ray", "--", "python", "x.py"])
    assert rc == 2 and "not available on apulis" in capsys.readouterr().err


def test_nccl_report_cli(tmp_path, capsys):
    one, two = tmp_path / "one.out", tmp_path / "two.out"
    one.write_text(all_reduce_1node())
    two.write_text(all_reduce_2nodes())
    assert main(["nccl-report", str(two), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["avg_busbw_gbps"], r["ranks"]) for r in data["runs"]] == [(164.643, 16)]
    assert main(["nccl-report", str(one)]) == 0
    assert "average bus bandwidth: 232.915 GB/s" in capsys.readouterr().out


def test_nccl_report_each_run_and_expect(tmp_path, capsys):
    """Seed 002's two runs in one file are reported one by one; --expect exits 1 when one is below it."""
    both = tmp_path / "both.out"
    both.write_text(all_reduce_1node() + all_reduce_2nodes())
    assert main(["nccl-report", str(both), "--json", "--expect", "160"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["avg_busbw_gbps"], r["ranks"]) for r in data["runs"]] == [(232.915, 8), (164.643, 16)]
    assert main(["nccl-report", str(both), "--expect", "165"]) == 1
    captured = capsys.readouterr()
    assert "run 1:" in captured.out and "run 2:" in captured.out
    assert "run 2: 164.643 GB/s average bus bandwidth, below the expected 165\n" in captured.err


def test_nccl_report_holds_each_run_to_what_the_site_measured(tmp_path, capsys):
    """oci's profile carries the guide's own figures (233 GB/s on one node, 165 on two): each run is held to 90 % of
    the figure for its node count, so the guide's own runs pass, and a two-node run at one-node speed is fine
    while a one-node run at two-node speed is not."""
    both = tmp_path / "both.out"
    both.write_text(all_reduce_1node() + all_reduce_2nodes())
    assert main(["nccl-report", str(both), "--site", "oci", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["expected_gbps"] == [209.7, 148.5]
    slow = tmp_path / "slow.out"
    slow.write_text(all_reduce_1node().replace("232.83", "164.07").replace("233.00", "165.21")
                    .replace("Avg bus bandwidth    : 232.915", "Avg bus bandwidth    : 164.643"))
    assert main(["nccl-report", str(slow), "--site", "oci"]) == 1
    assert "below the expected 209.7 (90 % of what oci's profile says it measured)" in capsys.readouterr().err
    assert main(["nccl-report", str(slow), "--site", "oci", "--expect", "100"]) == 0  # --expect wins


def test_a_relative_image_file_is_named_by_its_absolute_path(tmp_path, capsys, monkeypatch):
    """Pyxis takes `images/x.sqsh` for a registry image (a file starts with / or .), and the tasks may start in
    another folder: the script names the file absolutely."""
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "x.sqsh").write_bytes(b"hsqs")
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--site", "oci", "--image", "images/x.sqsh", "--dry-run", "--", "hello"]) == 0
    assert f"export CKIT_IMAGE={tmp_path}/images/x.sqsh\n" in capsys.readouterr().out


def test_a_missing_relative_image_file_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--site", "oci", "--image", "nope.sqsh", "--dry-run", "--", "hello"]) == 2
    err = capsys.readouterr().err
    assert f"--image nope.sqsh: {tmp_path}/nope.sqsh does not exist" in err and f"ls {tmp_path}" in err
    assert main(["shell", "--site", "oci", "--image", "./nope.sqsh", "--dry-run"]) == 2
