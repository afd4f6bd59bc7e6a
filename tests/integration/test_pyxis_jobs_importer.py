"""Registry references run through ckit's importer: Pyxis configured ``importer=`` (a wrapper naming its config
file, as an admin's /etc/ckit/importer.yaml would), on two nodes; the reference by tag (under
``sbatch --export=NONE`` too) and by digest. Each node's Pyxis calls ``get``, and the file it prints is what the
container is made from: the nodes' enroot pulled nothing (its layer cache stays empty), and a later ``get`` for
the reference is served from the cache without converting.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.importer_jobs import Importing, enroot_layers, importing, served_from_cache
from tests.integration.pyxis_jobs import ran_clean


@pytest.fixture(scope="module")
def setup(slurm, podman, debian_image, tmp_path_factory) -> Iterator[Importing]:  # type: ignore[no-untyped-def]
    with importing(slurm, debian_image, tmp_path_factory.mktemp("importer"), squashfuse=False) as ready:
        yield ready


def test_a_reference_by_tag(setup: Importing, tmp_path: Path) -> None:
    pulled = enroot_layers(setup.cluster)
    ran_clean(setup.cluster, setup.work, tmp_path, "--image", setup.work.ref)
    assert enroot_layers(setup.cluster) == pulled
    served_from_cache(setup, setup.work.ref)


def test_a_reference_by_tag_under_export_none(setup: Importing, tmp_path: Path) -> None:
    """The job's environment holds nothing of the submit shell's: the importer's settings are the site's."""
    ran_clean(setup.cluster, setup.work, tmp_path, "--image", setup.work.ref, export_none=True)


def test_a_reference_by_digest(setup: Importing, tmp_path: Path) -> None:
    pulled, pinned = enroot_layers(setup.cluster), setup.work.pinned
    job = ran_clean(setup.cluster, setup.work, tmp_path, "--image", pinned)
    assert f"#{pinned.split('/', 1)[1]}'" in job.script and enroot_layers(setup.cluster) == pulled  # REGISTRY#REPO@…
    served_from_cache(setup, pinned)
