"""What a site's profile says its Pyxis can do (``importer:``, ``squashfuse:``) decides how ckit's jobs start
(pure: tests/integration/test_pyxis_jobs_squashfuse*.py run the scripts under the real Pyxis 0.24.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.errors import ConfigError
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.site import load_site
from buildkit.site.compat import pyxis_lacks, pyxis_starts_from_importer
from tests.unit.test_site_runtimes import _site as site_folder

FAST = "{kind: pyxis, version: 0.24.0, enroot: 4.1.2, importer: ckit, squashfuse: true}"


def _sites(tmp_path: Path, runtime: str = FAST) -> Path:
    return site_folder(tmp_path, runtime)  # the profile "mine"


def _script(tmp_path: Path, runtime: str = FAST, **kw: object) -> str:
    site = load_site("mine", [_sites(tmp_path, runtime)])
    return render_sbatch(plan_launch(site, LaunchRequest(**{"command": ("python", "x.py"), **kw})))


def _start(script: str) -> str:
    return next(line for line in script.splitlines() if line.startswith("# Pyxis start: "))


@pytest.mark.parametrize("image", ["/shared/a.sqsh", "nvcr.io/nvidia/pytorch:24.06-py3"])
def test_with_squashfuse_the_steps_run_unnamed_and_nothing_is_removed(tmp_path: Path, image: str) -> None:
    script = _script(tmp_path, image=image)
    assert "--container-name" not in script and "ckit_container" not in script and "enroot remove" not in script
    assert "--container-image=\"${CKIT_IMAGE}\"" in script and "export ENROOT_LOGIN_SHELL=no" in script
    assert "straight from the .sqsh" in _start(script) and "nothing unpacked" in _start(script)
    assert ("importer (ckit) serves" in _start(script)) == (not image.startswith("/"))


def test_kept_containers_stay_named_on_a_squashfuse_site(tmp_path: Path) -> None:
    script = _script(tmp_path, image="/shared/a.sqsh", keep_container=True)
    assert '--container-name="${ckit_container}"' in script and "stat -L -c" in script
    assert "kept for later jobs" in _start(script)


@pytest.mark.parametrize(("runtime", "image", "why"), [
    ("{kind: pyxis, version: 0.24.0}", "/shared/a.sqsh", "no squashfuse: true in the site's profile"),
    ("{kind: pyxis, version: 0.24.0, squashfuse: true}", "nvcr.io/x/y:1", "no importer: in the site's profile"),
    ("{kind: pyxis, version: 0.23.0, importer: ckit, squashfuse: true}", "nvcr.io/x/y:1",
     "Pyxis 0.23.0 starts an importer's file directly only from 0.24"),
    ("{kind: pyxis, version: 0.24.0, importer: ckit}", "nvcr.io/x/y:1", "no squashfuse: true"),
])
def test_otherwise_the_job_names_one_container_and_says_why(tmp_path: Path, runtime: str, image: str,
                                                           why: str) -> None:
    script = _script(tmp_path, runtime, image=image)
    assert '--container-name="${ckit_container}"' in script and "trap ckit_remove_container EXIT" in script
    assert "unpack" in _start(script) and why in _start(script)


def test_the_builtin_oci_profile_unpacks_once_per_job() -> None:
    script = render_sbatch(plan_launch(load_site("oci"), LaunchRequest(command=("x",), image="nvcr.io/x/y:1")))
    assert _start(script).startswith("# Pyxis start: enroot import (download, unpack, squash) and enroot create")


@pytest.mark.parametrize(("runtime", "message"), [
    ("{kind: pyxis, version: 0.x, squashfuse: true}", "Pyxis 0.x has no use_squashfuse=1 (it came with Pyxis 0.22)"),
    ("{kind: pyxis, squashfuse: true}", "a Pyxis of no stated version has no use_squashfuse=1"),
    ("{kind: pyxis, version: '0.20', importer: ckit}", "Pyxis 0.20 has no importer= (it came with Pyxis 0.21)"),
    ("{kind: podman, squashfuse: true}", "squashfuse is a Pyxis option, not podman's"),
])
def test_a_profile_claiming_what_its_pyxis_lacks_is_refused(tmp_path: Path, runtime: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_site("mine", [_sites(tmp_path, runtime)])
    assert err.value.exit_code == 2 and message in str(err.value)


def test_versions() -> None:
    assert pyxis_lacks("squashfuse", "0.22") is None and pyxis_lacks("importer", "0.21.0") is None
    assert pyxis_starts_from_importer("0.24.0") and not pyxis_starts_from_importer("0.23.9")
    assert not pyxis_starts_from_importer(None)


def test_dry_run_says_how_the_job_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sites = _sites(tmp_path)
    assert main(["--sites", str(sites), "launch", "--site", "mine", "--image", "nvcr.io/x/y:1", "--dry-run",
                 "--", "python", "x.py"]) == 0
    assert "# Pyxis start: straight from the .sqsh the site's importer (ckit) serves" in capsys.readouterr().out


def test_a_squashfuse_site_gets_lz4_from_stage_convert_and_the_importer(tmp_path: Path) -> None:
    """squashfuse reads the file for the job's whole life: lz4:1 (squashfs.SQUASHFUSE); unpacked sites keep zstd:-3."""
    from buildkit.image.squashfs.compression import choose_for
    from buildkit.importer import config

    sites = _sites(tmp_path)
    assert choose_for(None, load_site("mine", [sites]), "sqsh").label == "lz4:1"
    assert choose_for(None, load_site("oci"), "sqsh").label == "zstd:-3"
    assert choose_for("zstd", load_site("mine", [sites]), "sqsh").label == "zstd:-3"  # asked for
    conf = tmp_path / "importer.yaml"
    conf.write_text(f"cache: {tmp_path / 'cache'}\nsite: mine\n")
    assert config.load({config.CONFIG_ENV: str(conf)}, (sites,)).squashfuse


def test_no_stage_advice_where_the_sites_importer_converts_once(tmp_path: Path) -> None:
    def warnings(runtime: str) -> tuple[str, ...]:
        site = load_site("mine", [_sites(tmp_path, runtime)])
        return plan_launch(site, LaunchRequest(command=("x",), image="nvcr.io/x/y:1")).warnings

    assert not any("every node imports" in w for w in warnings(FAST))
    assert any("every node imports" in w for w in warnings("{kind: pyxis, version: 0.24.0}"))
