"""The apptainer engine's cache in the artifact store, and placing its .sif at the output (no apptainer needed).

The build itself needs apptainer, which Debian 12 (and so CI) does not have; its command line is tested in
test_engine.py. Here a real SIF written by apptainer (../shared/testdata/sif) stands in the store as an earlier build.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from buildkit.engine.apptainer import ApptainerEngine, store_key
from buildkit.engine.base import BuildRequest
from buildkit.orchestration.build import execute, plan_build
from buildkit.recipe.catalog import Catalog
from buildkit.render.context import build_context
from buildkit.storage.store import Store
from tests.testdata import sif_dir

REAL_SIF = sif_dir() / "busybox_amd64.sif"


def publish(store: Store, build_key: str, source: Path) -> Path:
    key = store_key(build_key)
    temp = store.temp_path(key, "sif")
    shutil.copyfile(source, temp)
    return store.publish(key, "sif", temp, {"target": "sif", "engine": "apptainer"}, verify=lambda path: None).path


@pytest.fixture
def demo_plan(tmp_path: Path) -> tuple[Any, Any]:
    demo = Catalog.from_dirs().resolve("demo")
    context = build_context(demo, fmt="singularity")
    plan = plan_build(demo, context, engine="apptainer", engine_reason="apptainer (requested)", product="sif",
                      targets=("sif",), output_dir=tmp_path / "out")
    return plan, context


def test_store_key_depends_on_the_build_key() -> None:
    assert store_key("a" * 64) == store_key("a" * 64) != store_key("b" * 64)


def test_cache_miss_then_hit_from_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    engine = ApptainerEngine(store)
    request = BuildRequest([], "k" * 64, "localhost/ckit/demo:x")
    assert engine.cached(request) is None
    path = publish(store, request.key, REAL_SIF)
    hit = engine.cached(request)
    assert hit is not None and (hit.ref, hit.cache_hit, hit.engine) == (str(path), True, "apptainer")


def test_a_file_that_is_not_a_sif_is_no_cache_hit(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    bogus = tmp_path / "bogus.sif"
    bogus.write_bytes(b"not a SIF at all" * 100)
    path = publish(store, "k" * 64, bogus)
    assert ApptainerEngine(store).cached(BuildRequest([], "k" * 64, "t")) is None
    assert not path.exists()  # the store dropped the entry that failed verification


def test_execute_places_the_cached_sif_at_the_output(tmp_path: Path, demo_plan: tuple[Any, Any]) -> None:
    plan, context = demo_plan
    store = Store(tmp_path / "cache")
    publish(store, plan.build_key, REAL_SIF)
    result = execute(plan, ApptainerEngine(store), context, lambda event: None)
    (artifact,) = result.artifacts
    output = tmp_path / "out" / f"demo-{plan.fingerprint[:12]}.sif"
    assert (artifact.kind, artifact.location, artifact.cache_hit) == ("sif", str(output), True)
    assert output.read_bytes() == REAL_SIF.read_bytes() and artifact.size == REAL_SIF.stat().st_size
    assert sorted(p.name for p in output.parent.iterdir()) == [output.name]
