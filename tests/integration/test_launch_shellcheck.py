"""Every generated script parses with ``bash -n`` and passes ``shellcheck -S warning`` (the real tools)."""

from __future__ import annotations

import pytest

from buildkit.launch.plan import plan_launch
from buildkit.launch.schedulers.dlws import render_dlws
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.process import run
from buildkit.site import load_site
from tests.unit.launch_cases import APULIS_REQUESTS, all_slurm_cases

CASES = all_slurm_cases()


def _check(path):
    assert run(["bash", "-n", str(path)], check=False).returncode == 0
    lint = run(["shellcheck", "-S", "warning", "-s", "bash", "-f", "gcc", str(path)], check=False)
    assert lint.returncode == 0, lint.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_sbatch_scripts_pass_bash_n_and_shellcheck(case, tmp_path):
    site, request = CASES[case]
    path = tmp_path / f"{case}.sbatch"
    path.write_text(render_sbatch(plan_launch(load_site(site), request)))
    _check(path)


@pytest.mark.parametrize("case", sorted(APULIS_REQUESTS))
def test_dlws_files_pass_bash_n_and_shellcheck(case, tmp_path):
    job = render_dlws(plan_launch(load_site("apulis"), APULIS_REQUESTS[case]))
    command = tmp_path / "command.sh"
    command.write_text("#!/bin/bash\n# DLWS_* variables are set by the platform\n# shellcheck disable=SC2154\n"
                       + job.command + "\n")
    _check(command)
    for index, (_, content) in enumerate(job.files):
        path = tmp_path / f"file{index}.sh"
        path.write_text(content)
        _check(path)
