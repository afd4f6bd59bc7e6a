"""plan_build, targets, labels and the lock file reader (pure; the real demo stack from the built-in recipes)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from buildkit import __version__
from buildkit.engine.apptainer import ApptainerEngine
from buildkit.engine.base import BuildRequest, BuiltImage
from buildkit.errors import ConfigError
from buildkit.orchestration.build import (
    check_cache,
    check_rebuild_flags,
    engine_labels,
    execute,
    parse_targets,
    plan_build,
)
from buildkit.orchestration.locked import check_lock as check_lock_fingerprint
from buildkit.orchestration.locked import read_lock
from buildkit.recipe.catalog import Catalog
from buildkit.render.context import build_context, context_tar

PINNED = "127.0.0.1:5000/debian:bookworm@sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def demo() -> Any:
    return Catalog.from_dirs().resolve("demo")


def docker_plan(demo: Any, **kwargs: Any) -> Any:
    base_override = kwargs.pop("base_override", None)
    context = build_context(demo, fmt="docker", base_override=base_override)
    options: dict[str, Any] = {"engine": "docker", "engine_reason": "docker (auto; podman 4.3.1 at unix:///s)",
                               "product": "image", "targets": ("image", "sif", "sqsh"), "output_dir": Path("out")}
    return plan_build(demo, context, base_override=base_override, **{**options, **kwargs}), context


@pytest.mark.parametrize(("text", "product", "expected"), [
    (None, "image", ("image",)),
    (None, "sif", ("sif",)),
    ("sqsh,image", "image", ("image", "sqsh")),
    (" sif , sqsh ,sif", "image", ("sif", "sqsh")),
    ("sif", "sif", ("sif",)),
])
def test_targets_in_canonical_order(text: str | None, product: str, expected: tuple[str, ...]) -> None:
    assert parse_targets(text, product) == expected


def test_unknown_target_is_bad_input() -> None:
    with pytest.raises(ConfigError) as err:
        parse_targets("sif,tarball", "image")
    assert (str(err.value), err.value.exit_code) == (
        "--to: unknown target tarball\n  hint: choose from image,sif,sqsh, comma-separated", 2)


def test_apptainer_cannot_make_an_image_or_sqsh() -> None:
    with pytest.raises(ConfigError) as err:
        parse_targets("sif,sqsh", "sif")
    assert str(err.value) == ("--to sqsh: the selected engine builds a .sif only\n"
                              "  hint: use --engine docker (it builds an OCI image that converts to sif and sqsh)")


def test_docker_plan(demo: Any, golden: Any) -> None:
    plan, context = docker_plan(demo)
    fp12 = demo.fingerprint[:12]
    assert plan.tag == f"localhost/ckit/demo:{fp12}"
    assert plan.build_key == hashlib.sha256(context_tar(context)).hexdigest()
    assert [(o.kind, o.path) for o in plan.outputs] == [("sif", Path(f"out/demo-{fp12}.sif")),
                                                         ("sqsh", Path(f"out/demo-{fp12}.sqsh"))]
    assert plan.labels == ()  # the renderer already writes stack, parameters, version and fingerprint
    assert plan.cached is None
    request = plan.request(context)
    assert (request.key, request.tag, request.context) == (plan.build_key, plan.tag, context)
    json.dumps(plan.as_json())
    golden("build/demo-plan.txt", plan.describe().replace(demo.fingerprint, "<fingerprint>")
           .replace(fp12, "<fp12>").replace(plan.build_key, "<build key>"))


def test_cached_plan_says_no_build_work(demo: Any) -> None:
    plan, _ = docker_plan(demo, targets=("image",))
    lines = replace(plan, cached=True).describe().splitlines()
    assert lines[-1] == f"  1. reuse localhost/ckit/demo:{demo.fingerprint[:12]} (cache hit: no build work)"


def test_apptainer_plan_copies_the_sif_from_the_store(demo: Any) -> None:
    context = build_context(demo, fmt="singularity")
    plan = plan_build(demo, context, engine="apptainer", engine_reason="apptainer (requested; /usr/bin/apptainer)",
                      product="sif", targets=("sif",), output_dir=Path("/data"))
    assert [p for p, _ in plan.context_files] == ["Singularity.def", "files/1-demo/hello"]
    text = plan.describe()
    assert f"  1. build .sif in the artifact store (key {plan.build_key[:12]})\n" in text
    assert text.endswith(f"  2. copy the .sif -> /data/demo-{demo.fingerprint[:12]}.sif\n")


def test_a_tag_given_is_used(demo: Any) -> None:
    plan, _ = docker_plan(demo, tag="127.0.0.1:5000/team/demo:v1")
    assert plan.tag == "127.0.0.1:5000/team/demo:v1"


def test_locked_plan_builds_from_the_digest_and_labels_it(demo: Any) -> None:
    plain, _ = docker_plan(demo)
    locked, context = docker_plan(demo, base_override=PINNED)
    assert f"FROM {PINNED}\n".encode() in next(f.data for f in context if f.path == "Dockerfile")
    assert locked.build_key != plain.build_key
    assert locked.tag == f"localhost/ckit/demo:{demo.fingerprint[:12]}-locked"
    assert locked.labels == (("org.opencontainers.image.base.digest", "sha256:" + "ab" * 32),)
    assert f"  base         {PINNED}\n" in locked.describe()


def test_engine_labels_fill_in_what_the_recipe_lacks(demo: Any) -> None:
    bare = replace(demo, labels=(("org.opencontainers.image.title", "x"),))
    labels = dict(engine_labels(bare, None))
    assert labels == {"io.ckit.stack": "demo", "io.ckit.version": __version__, "io.ckit.fingerprint": demo.fingerprint,
                      "io.ckit.parameters": json.dumps(demo.parameters, sort_keys=True, separators=(",", ":"))}


def lock_text(demo: Any, **changes: Any) -> str:
    data = {"lockVersion": 1, "stack": "demo", "sets": [], "ngc": None, "parameters": demo.parameters,
            "fingerprint": demo.fingerprint,
            "base": {"image": "localhost/debian:bookworm", "canonical": "127.0.0.1:5000/debian:bookworm",
                     "digest": "sha256:" + "ab" * 32, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                     "pinned": PINNED}}
    data.update(changes)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def test_lock_file_gives_the_pinned_base(demo: Any, tmp_path: Path) -> None:
    path = tmp_path / "ckit.lock"
    path.write_text(lock_text(demo))
    assert check_lock_fingerprint(read_lock(path, "demo"), path, demo) == PINNED


@pytest.mark.parametrize(("changes", "message"), [
    ({"stack": "nccl-tests"}, "--locked: {path} pins stack nccl-tests, not demo"),
    ({"lockVersion": 7}, "--locked: {path} has lockVersion 7; this ckit reads version 1"),
    ({"base": {"pinned": "localhost/debian:bookworm"}}, "--locked: {path}: base.pinned 'localhost/debian:bookworm' "
                                                        "has no digest"),
    ({"base": {}}, "--locked: {path} lacks base.pinned"),
])
def test_bad_lock_files_are_bad_input(demo: Any, tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    path = tmp_path / "ckit.lock"
    path.write_text(lock_text(demo, **changes))
    with pytest.raises(ConfigError) as err:
        read_lock(path, "demo")
    assert err.value.message == message.format(path=path) and err.value.exit_code == 2


def test_missing_or_broken_lock_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ckit.lock does not exist") as err:
        read_lock(tmp_path / "ckit.lock", "demo")
    assert err.value.hint == "run `ckit lock demo` first"
    (tmp_path / "ckit.lock").write_text("{not json")
    with pytest.raises(ConfigError, match=r"is not a ckit lock file"):
        read_lock(tmp_path / "ckit.lock", "demo")


def test_stale_lock_is_refused(demo: Any, tmp_path: Path) -> None:
    path = tmp_path / "ckit.lock"
    path.write_text(lock_text(demo, fingerprint="0" * 64))
    with pytest.raises(ConfigError) as err:
        check_lock_fingerprint(read_lock(path, "demo"), path, demo)
    assert err.value.message == (f"--locked: {path} was written for demo with fingerprint 000000000000, but the "
                                 f"recipe now resolves to {demo.fingerprint[:12]} (a recipe, --set or --ngc value "
                                 "changed)")


class RememberingEngine:
    """An engine that has every image already (any key), and remembers what it was asked."""

    name, context_format, product = "docker", "docker", "image"
    keeps_layers, image_daemon = True, None

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.requests: list[BuildRequest] = []

    def cached(self, request: BuildRequest) -> BuiltImage | None:
        self.asked.append("cached")
        return BuiltImage("docker", request.tag, "sha256:old", 0.0, True)

    def build(self, request: BuildRequest, listener: Any) -> BuiltImage:
        self.requests.append(request)
        return BuiltImage("docker", request.tag, "sha256:new", 1.0, False)


@pytest.mark.parametrize(("flags", "words"), [({"no_cache": True}, "--no-cache"), ({"pull": True}, "--pull"),
                                              ({"no_cache": True, "pull": True}, "--no-cache --pull")])
def test_no_cache_and_pull_build_even_when_the_key_matches(demo: Any, flags: dict[str, bool], words: str) -> None:
    plan, context = docker_plan(demo, targets=("image",), **flags)
    engine = RememberingEngine()
    plan, hit = check_cache(plan, engine, context)  # type: ignore[arg-type]
    assert (hit, plan.cached, engine.asked) == (None, False, [])  # the build key was not even looked up
    assert plan.describe().splitlines()[-1] == (f"  1. build localhost/ckit/demo:{demo.fingerprint[:12]} "
                                                f"({words}: even if built before)")
    assert {k: plan.as_json()[k] for k in ("no_cache", "pull")} == {"no_cache": False, "pull": False, **flags}
    result = execute(plan, engine, context)  # type: ignore[arg-type]
    assert engine.asked == []
    [request] = engine.requests  # built, with the flags for the engine
    assert (request.no_cache, request.pull) == (flags.get("no_cache", False), flags.get("pull", False))
    assert result.artifacts[0].digest == "sha256:new" and not result.artifacts[0].cache_hit


def test_without_them_a_matching_key_is_reused(demo: Any) -> None:
    plan, context = docker_plan(demo, targets=("image",))
    engine = RememberingEngine()
    plan, hit = check_cache(plan, engine, context)  # type: ignore[arg-type]
    assert hit is not None and plan.cached and engine.asked == ["cached"]
    result = execute(plan, engine, context, cached=hit)  # type: ignore[arg-type]
    assert engine.requests == [] and result.artifacts[0].cache_hit


def test_the_apptainer_engine_refuses_them() -> None:
    with pytest.raises(ConfigError) as err:
        check_rebuild_flags(ApptainerEngine(), no_cache=True, pull=True)
    assert err.value.message == ("--no-cache --pull: options of the docker engine (docker/podman build); the "
                                 "apptainer engine keeps no build layers and does not take them")
    assert err.value.exit_code == 2
    check_rebuild_flags(ApptainerEngine(), no_cache=False, pull=False)
