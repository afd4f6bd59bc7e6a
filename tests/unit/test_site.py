"""Site profiles: schema, provenance tags, layered folders, and the `ckit sites` output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.errors import ConfigError
from buildkit.site import list_sites, load_site
from buildkit.site.describe import site_text
from buildkit.site.schema import SITE_SCHEMA

NAMES = ["apulis", "local", "neuron", "oci", "tara", "twnia2"]


def _walk(schema, path="site"):
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{key}")
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and extra.get("type") == "object":
        yield from _walk(extra, f"{path}.*")
    if isinstance(schema.get("items"), dict) and schema["items"].get("type") == "object":
        yield from _walk(schema["items"], f"{path}[]")


def test_schema_describes_every_key_and_closes_every_object():
    for path, node in _walk(SITE_SCHEMA):
        assert node.get("description"), path
        if node.get("type") == "object" and "properties" in node:
            assert node["additionalProperties"] is False, path


def test_builtin_sites_load():
    sites = list_sites()
    assert [s.name for s in sites] == NAMES
    by_name = {s.name: s for s in sites}
    assert by_name["twnia2"].squashfs_compressions == ("gzip", "xz", "lzo")
    assert not by_name["twnia2"].can_mount("zstd") and by_name["oci"].can_mount("zstd")
    assert by_name["tara"].compute_internet is False and by_name["oci"].compute_internet is True
    assert by_name["neuron"].policy.forbid_options == ("mem",)
    assert by_name["local"].default_partition == "debug" and by_name["local"].mpi_plugin == "pmi2"
    assert [r.kind for r in by_name["local"].runtimes] == ["podman", "charliecloud", "none"]
    assert by_name["apulis"].scheduler == "dlws" and by_name["apulis"].shared_image_dir is None
    assert by_name["twnia2"].fact("policy.cpus_per_gpu").tag == "verified"
    assert by_name["twnia2"].fact("partitions.gp1d.max_time").tag == "verified"
    assert by_name["twnia2"].fact("compute_internet").tag == "uncertain"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "sites"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return folder


BASE = """name: mine
description: test site
scheduler: slurm
partitions:
  p1: {gpus_per_node: 2, cpus_per_node: 8}
default_partition: p1
runtimes: [{kind: none}]
compute_internet: true
"""


def test_user_folder_layers_over_builtins(tmp_path, monkeypatch):
    folder = _write(tmp_path, "mine", BASE)
    assert load_site("mine", [folder]).partition(None).cpus_per_node == 8
    monkeypatch.setenv("CKIT_SITES_PATH", str(folder))
    assert "mine" in [s.name for s in list_sites()]
    override = _write(tmp_path, "local", BASE.replace("name: mine", "name: local"))
    assert load_site("local", [override]).description == "test site"


def test_unknown_key_names_file_line_and_suggestion(tmp_path):
    folder = _write(tmp_path, "mine", BASE + "compute_internt: false\n")
    with pytest.raises(ConfigError) as err:
        load_site("mine", [folder])
    assert f"{folder / 'mine.yaml'}:9: invalid site profile: unknown key 'compute_internt'" in str(err.value)
    assert "did you mean 'compute_internet'?" in str(err.value)


@pytest.mark.parametrize(("extra", "expected"), [
    ("facts:\n  nothere: {tag: verified}\n", "fact names a key path that is not in the profile: nothere"),
    ("facts:\n  scheduler: {tag: sure}\n", "'sure' is not one of: verified, seed, uncertain"),
    ("policy: {comment_choices: [a]}\n", "comment_choices without require_comment: true"),
])
def test_semantic_errors(tmp_path, extra, expected):
    folder = _write(tmp_path, "mine", BASE + extra)
    with pytest.raises(ConfigError) as err:
        load_site("mine", [folder])
    assert expected in str(err.value)


def test_unknown_site_suggests(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_site("twnia")
    assert "did you mean 'twnia2'?" in str(err.value)


@pytest.mark.parametrize("name", NAMES)
def test_sites_show_golden(name, golden):
    text = site_text(load_site(name)).replace(str(load_site(name).path), f"sites/{name}.yaml")
    golden(f"sites/{name}.txt", text)


def test_sites_commands_json(capsys):
    assert main(["sites", "--json"]) == 0
    assert [s["name"] for s in json.loads(capsys.readouterr().out)] == NAMES
    assert main(["sites", "show", "oci", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["env"]["NCCL_IB_GID_INDEX"] == "3" and data["facts"]["mpi_plugin"]["tag"] == "verified"
    assert main(["sites", "show", "nope"]) == 2


def test_user_site_with_apptainer_through_the_cli(tmp_path, capsys):
    folder = _write(tmp_path, "mine", BASE.replace("runtimes: [{kind: none}]",
                                                   "runtimes: [{kind: apptainer, module: apptainer/1.2.5}]"))
    rc = main(["--sites", str(folder), "launch", "--site", "mine", "--image", "/img/x.sif", "--framework", "ddp",
               "--dry-run", "--", "python", "t.py"])
    out = capsys.readouterr().out
    assert rc == 0 and "module purge\nmodule load apptainer/1.2.5\n" in out
    last = out.splitlines()[-1]
    assert last.startswith('srun --kill-on-bad-exit=1 --export=ALL env APPTAINERENV_MASTER_ADDR="${MASTER_ADDR}" ')
    assert "SINGULARITYENV_" not in last and ' apptainer exec --nv "${CKIT_IMAGE}" sh -c ' in last
