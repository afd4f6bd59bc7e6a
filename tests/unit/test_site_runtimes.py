"""Site profiles name their runtime's version, and what ckit writes for a site follows it (pure: no runtime runs
here; tests/integration/test_singularity_*.py run SingularityCE 3.4.2 itself)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.errors import ConfigError
from buildkit.image.squashfs.compression import choose_for
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.site import load_site
from buildkit.site.compat import SIF_LAYER_PROTO, SIF_LAYER_V1, parse_version, sif_reads
from tests.testdata import sif_dir

REAL_SIF = sif_dir() / "busybox_amd64.sif"  # gzip, Singularity 3.8.1

SITE = """name: mine
description: test site
scheduler: slurm
partitions:
  p1: {gpus_per_node: 0}
default_partition: p1
runtimes: [RUNTIME]
compute_internet: true
"""


def _site(tmp_path: Path, runtime: str, extra: str = "") -> Path:
    folder = tmp_path / "sites"
    folder.mkdir(exist_ok=True)
    (folder / "mine.yaml").write_text(SITE.replace("RUNTIME", runtime) + extra)
    return folder


def test_the_builtin_singularity_sites_get_gzip_and_the_layer_type_their_version_pulls() -> None:
    for name in ("twnia2", "tara", "neuron"):
        site = load_site(name)
        assert site.compressions("sif") == ("gzip", "xz", "lzo")
        assert choose_for(None, site, "sif").label == "gzip:1"
    assert load_site("twnia2").sif_layer_type() == load_site("tara").sif_layer_type() == SIF_LAYER_PROTO  # any 3.x
    assert load_site("neuron").sif_layer_type() == SIF_LAYER_V1  # singularity/3.11.0
    oci = load_site("oci")
    assert oci.runtimes[0].enroot == "3.4.1" and oci.compressions("sif") == () and not oci.sif_runtimes()


def test_a_site_without_a_kernel_rule_still_gets_no_zstd_sif_from_singularity(tmp_path: Path) -> None:
    """SingularityCE refuses a zstd partition whatever the kernel mounts: the version is the rule."""
    site = load_site("mine", [_site(tmp_path, "{kind: singularity}")])
    assert site.squashfs_compressions == () and "zstd" not in site.compressions("sif")
    assert choose_for(None, site, "sif").label == "gzip:1"
    assert site.compressions("sqsh") == ()  # a .sqsh is not singularity's
    with pytest.raises(ConfigError) as err:
        choose_for("zstd", site, "sif")
    assert err.value.exit_code == 2
    assert str(err.value).startswith("--compress zstd: a zstd .sif does not run on mine: its singularity (version "
                                     "not given: any) reads no zstd squashfs in a .sif")
    assert "use gzip or lzma or lzo or xz or lz4, or leave --compress out" in str(err.value)


@pytest.mark.parametrize(("runtime", "default", "layer"), [
    ("{kind: apptainer, version: '1.4'}", "zstd:1", SIF_LAYER_V1),
    ("{kind: apptainer, version: '1.3.6'}", "gzip:1", SIF_LAYER_V1),
    ("{kind: singularity, version: '3.7'}", "gzip:1", SIF_LAYER_V1),
    ("{kind: singularity, version: 3.6.4}", "gzip:1", SIF_LAYER_PROTO),
    ("{kind: singularity, version: 4.x}", "gzip:1", SIF_LAYER_V1),
])
def test_the_version_decides(tmp_path: Path, runtime: str, default: str, layer: str) -> None:
    site = load_site("mine", [_site(tmp_path, runtime)])
    assert choose_for(None, site, "sif").label == default
    assert site.sif_layer_type() == layer


def test_versions() -> None:
    assert parse_version("3.x") == parse_version("3") == (3, 0, 0) and parse_version("3.11") == (3, 11, 0)
    assert "zstd" in sif_reads("apptainer", "1.4.0") and "zstd" not in sif_reads("singularity", "4.3.1")
    with pytest.raises(ValueError):
        parse_version("3.x.1")


@pytest.mark.parametrize(("runtime", "message"), [
    ("{kind: singularity, version: '2.6'}", "singularity 2.6 runs no .sif (SIF came with singularity 3.0) at "
                                            "'runtimes[0].version'"),
    ("{kind: singularity, enroot: '3.4'}", "enroot is the version pyxis drives, not singularity's"),
    ("{kind: apptainer, version: latest}", "does not match"),
])
def test_version_errors_name_the_key(tmp_path: Path, runtime: str, message: str) -> None:
    with pytest.raises(ConfigError, match="mine.yaml") as err:
        load_site("mine", [_site(tmp_path, runtime)])
    assert message in str(err.value)


def test_push_for_a_site_picks_the_layer_type_or_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sif = tmp_path / "bb.sif"
    shutil.copyfile(REAL_SIF, sif)
    layers = {}
    for site in ("twnia2", "neuron", None):
        argv = ["push", str(sif), "r.example/team/bb:1", "--dry-run", "--json", *(["--site", site] if site else [])]
        assert main(argv) == 0
        layers[site] = json.loads(capsys.readouterr().out)["layers"][0]["media_type"]
    assert layers == {"twnia2": SIF_LAYER_PROTO, "neuron": SIF_LAYER_V1, None: SIF_LAYER_PROTO}
    assert main(["push", str(sif), "r.example/team/bb:1", "--dry-run", "--site", "oci"]) == 2
    assert f"{sif} is a .sif, but oci runs .sqsh files (pyxis)" in capsys.readouterr().err


def test_a_singularity_task_fails_when_workdir_is_missing_instead_of_starting_in_home() -> None:
    def last_line(site: str, **kw: object) -> str:
        request = LaunchRequest(command=("python", "x.py"), image="/a.sif", workdir="/code", **kw)  # type: ignore[arg-type]
        return render_sbatch(plan_launch(load_site(site), request)).splitlines()[-1]

    script = render_sbatch(plan_launch(load_site("twnia2"), LaunchRequest(
        command=("python", "x.py"), image="/a.sif", workdir="/code", account="P")))
    assert "ckit_workdir='cd \"$1\" 2>/dev/null || {" in script and "exit 2; }; shift; exec \"$@\"'" in script
    line = last_line("twnia2", account="P")
    assert line.endswith('--pwd /code "${CKIT_IMAGE}" /bin/sh -c "${ckit_workdir}" ckit-workdir /code '
                         '/bin/sh -c "${ckit_entry}" ckit-entrypoint python x.py')
