"""ckit sites detect: Slurm's real answers (tests/data/slurm, from the test Slurm 22.05) read into a profile ckit
loads, and the probe script's answers read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.cluster import answers, detect, probe, slurmtext
from buildkit.errors import ConfigError
from buildkit.site.load import load_site_file

DATA = Path(__file__).parents[1] / "data" / "slurm"
COMPUTE = """ckit-probe host n1
ckit-probe arch x86_64
ckit-probe have.apptainer /usr/bin/apptainer
ckit-probe have.enroot /usr/bin/enroot
ckit-probe have.ch-run /usr/bin/ch-run
ckit-probe version.apptainer apptainer version 1.3.4
ckit-probe version.enroot 3.4.1
ckit-probe version.charliecloud 0.31
ckit-probe pyxis yes
ckit-probe fs./home/u nfs
ckit-probe seen /scratch/u/.ckit-detect-1
ckit-probe modules yes
ckit-probe module singularity/3.11.0
ckit-probe conda.env base
ckit-probe internet 401
ckit-probe done yes
"""


def _answers(**extra: object) -> answers.Answers:
    values: dict[str, object] = {
        "partitions": (DATA / "partitions-22.05.txt").read_text(), "nodes": (DATA / "nodes-22.05.txt").read_text(),
        "config": (DATA / "config-22.05.txt").read_text(), "mpi_list": (DATA / "mpi-list-22.05.txt").read_text(),
        "test_only": answers.Answer(0, "", (DATA / "test-only-22.05.txt").read_text()),
        "login_probe": "ckit-probe host vm\nckit-probe done yes\n"}
    values.update(extra)
    return answers.Answers(**values)  # type: ignore[arg-type]


def test_scontrol_records_of_the_test_slurm() -> None:
    parts = slurmtext.records((DATA / "partitions-22.05.txt").read_text())
    assert [(p["PartitionName"], p["Default"], p["Nodes"]) for p in parts] == [
        ("debug", "YES", "vm"), ("batch", "NO", "vm"), ("multi", "NO", "n[1-2]")]
    nodes = {n["NodeName"]: n for n in slurmtext.records((DATA / "nodes-22.05.txt").read_text())}
    assert set(nodes) == {"vm", "n1", "n2"}
    # OS= holds spaces and a '#'; the fields after it are still their own
    assert nodes["n1"]["OS"].startswith("Linux ") and nodes["n1"]["RealMemory"] == "1"
    assert nodes["n1"]["Partitions"] == "multi" and slurmtext.value(nodes["n1"], "Gres") is None


def test_config_mpi_test_only_and_sacctmgr_answers() -> None:
    conf = slurmtext.config((DATA / "config-22.05.txt").read_text())
    assert conf["MpiDefault"] == "none" and conf["PlugStackConfig"] == "(null)"
    assert slurmtext.mpi_plugins((DATA / "mpi-list-22.05.txt").read_text()) == ("pmix", "cray_shasta", "pmi2")
    assert slurmtext.mpi_plugins("srun: MPI types are...\nsrun: none\nsrun: pmi2\n") == ("pmi2",)
    assert slurmtext.test_only_refusal((DATA / "test-only-22.05.txt").read_text()) is None
    refused = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"
    assert slurmtext.test_only_refusal(refused) == "account"
    assert slurmtext.associations((DATA / "sacctmgr-without-slurmdbd-22.05.txt").read_text()) == []
    assert slurmtext.associations("proj1|normal,high\nproj2|\n") == [("proj1", ("normal", "high")), ("proj2", ())]


@pytest.mark.parametrize(("gres", "count", "kind"), [
    ("gpu:a100:4(S:0-1)", 4, "a100"), ("gpu:4", 4, None), ("gpu:v100:2,gpu:v100:2", 4, "v100"),
    ("gpu:a100:4(S:0-1),mps:400", 4, "a100"), (None, 0, None), ("mps:100", 0, None)])
def test_gres_strings(gres: str | None, count: int, kind: str | None) -> None:
    assert slurmtext.gpus(gres) == slurmtext.Gres(count, kind)


def test_values_slurm_leaves_unset_are_not_written() -> None:
    assert slurmtext.memory_mb("1") is None and slurmtext.memory_mb("515000") == 515000
    assert slurmtext.max_time("UNLIMITED") is None and slurmtext.max_time("2-00:00:00") == "2-00:00:00"
    assert slurmtext.hostlist(["n1", "n2", "n3"]) == "n[1-3]" and slurmtext.hostlist(["a", "b1"]) == "a,b1"


def test_the_detected_profile_loads_and_keeps_what_each_value_came_from(tmp_path: Path) -> None:
    found = detect.build("mine", _answers(compute_probe=COMPUTE, markers={"/scratch/u/.ckit-detect-1": "/scratch/u"},
                                          plugstack="required /usr/lib/pyxis/spank_pyxis.so use_squashfuse=1"),
                         today="2026-01-02")
    profile = found.profile
    assert profile["default_partition"] == "debug" and profile["partitions"]["multi"]["nodes"] == "n[1-2]"
    assert "mem_per_node_mb" not in profile["partitions"]["debug"]  # RealMemory=1: not configured, not invented
    assert [r["kind"] for r in profile["runtimes"]] == ["pyxis", "apptainer", "singularity", "charliecloud", "none"]
    assert profile["runtimes"][0] == {"kind": "pyxis", "squashfuse": True, "version": "0.22", "enroot": "3.4.1"}
    assert profile["runtimes"][2] == {"kind": "singularity", "module": "singularity/3.11.0"}
    assert profile["facts"]["runtimes.2"]["tag"] == "uncertain"
    assert profile["mpi_plugin"] == "pmi2" and profile["compute_internet"] is True
    assert profile["shared_image_dir"] == "/scratch/u/ckit-images"
    path = detect.write(found, str(tmp_path))
    site = load_site_file(Path(path))
    assert site.fact("partitions.multi").tag == "verified"  # type: ignore[union-attr]
    assert any("conda environments: base" in n for n in found.notes)


def test_without_the_probe_job_the_runtimes_are_the_login_nodes_and_uncertain(tmp_path: Path) -> None:
    login = "ckit-probe host login1\nckit-probe have.podman /usr/bin/podman\nckit-probe done yes\n"
    found = detect.build("mine", _answers(login_probe=login, compute_error="srun: error: Unable to allocate"))
    assert [r["kind"] for r in found.profile["runtimes"]] == ["podman", "none"]
    assert found.profile["facts"]["runtimes.0"]["tag"] == "uncertain"
    assert found.profile["compute_internet"] is False
    assert found.profile["facts"]["compute_internet"]["tag"] == "uncertain"
    assert "Unable to allocate" in found.notes[0]


def test_a_required_account_is_read_from_the_test_only_refusal() -> None:
    refusal = answers.Answer(1, "", "sbatch: error: Batch job submission failed: Invalid account or "
                                    "account/partition combination specified")
    found = detect.build("mine", _answers(test_only=refusal))
    assert found.profile["policy"] == {"require_account": True}


def test_the_diff_against_an_existing_profile() -> None:
    old = {"compute_internet": True, "runtimes": [{"kind": "podman"}], "facts": {"x": 1}}
    new = {"compute_internet": False, "runtimes": [{"kind": "podman"}], "facts": {"y": 2}}
    assert detect.diff(old, new) == ("compute_internet: True -> False",)


def test_a_profile_is_named_after_its_file(tmp_path: Path) -> None:
    found = detect.build("mine", _answers())
    with pytest.raises(ConfigError, match="named after the site"):
        detect.write(found, str(tmp_path / "other.yaml"))
    assert not (tmp_path / "other.yaml").exists()


def test_the_probe_script_and_its_reader() -> None:
    text = probe.script(("/scratch/u/.ckit-detect-1",), "http://10.0.0.1:5000/v2/")
    assert "for m in /scratch/u/.ckit-detect-1; do" in text
    assert "-w '%{http_code}' http://10.0.0.1:5000/v2/ " in text
    assert "'http://x/'\"'\"'; touch /p'" in probe.script((), "http://x/'; touch /p")  # one shell word
    found = probe.parse("banner\n" + COMPUTE)
    assert found.runtimes() == ("apptainer", "charliecloud", "pyxis") and found.complete
    assert found.versions == {"apptainer": "1.3.4", "enroot": "3.4.1", "charliecloud": "0.31"}
    assert found.reaches_registry and found.seen == ("/scratch/u/.ckit-detect-1",)
    assert probe.version_of("singularity-ce version 3.11.4-jammy") == "3.11.4"
    assert found.flavours == {}


def test_a_singularity_that_is_apptainers_alias_is_known_as_apptainer() -> None:
    """Apptainer's packages install `singularity` as an alias: its zstd support is Apptainer's, not 3.x's."""
    found = probe.parse("ckit-probe have.singularity /usr/bin/singularity\n"
                        "ckit-probe version.singularity apptainer version 1.4.5\nckit-probe done\n")
    assert found.versions == {"singularity": "1.4.5"} and found.flavours == {"singularity": "apptainer"}
    ce = probe.parse("ckit-probe version.singularity singularity-ce version 3.11.4-jammy\n")
    assert ce.flavours == {}


def test_apptainers_singularity_alias_is_one_runtime_in_the_profile() -> None:
    node = probe.parse("ckit-probe have.apptainer /usr/bin/apptainer\nckit-probe have.singularity /usr/bin/singularity\n"
                       "ckit-probe version.apptainer apptainer version 1.4.5\n"
                       "ckit-probe version.singularity apptainer version 1.4.5\nckit-probe done\n")
    found, _ = detect._runtimes(node, node, "", "2026-11-29", "n1")
    assert [entry["kind"] for entry in found] == ["apptainer", "none"]
    assert found[0]["version"] == "1.4.5"
