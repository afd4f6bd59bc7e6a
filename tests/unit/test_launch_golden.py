"""Golden job scripts: every site × framework it supports (default resources) and the seed guides' resources."""

from __future__ import annotations

import pytest

from buildkit.launch.plan import plan_launch
from buildkit.launch.schedulers.dlws import render_dlws
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.site import load_site
from tests.unit.launch_cases import APULIS_REQUESTS, all_slurm_cases

CASES = all_slurm_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_sbatch_golden(case, golden):
    site, request = CASES[case]
    text = render_sbatch(plan_launch(load_site(site), request))
    golden(f"launch/{case}.sbatch", text)
    assert render_sbatch(plan_launch(load_site(site), request)) == text


@pytest.mark.parametrize("case", sorted(APULIS_REQUESTS))
def test_dlws_golden(case, golden):
    job = render_dlws(plan_launch(load_site("apulis"), APULIS_REQUESTS[case]))
    golden(f"launch/{case}.txt", job.text())
