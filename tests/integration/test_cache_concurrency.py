"""The cluster cache under failure and load: converters killed with SIGKILL at random moments, eviction while steps
read, and a converter stuck at 100 % CPU (in the cluster cache and in the local store)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

from buildkit.registry.distribution.client import RegistryClient
from buildkit.storage.cache import image_ref_name
from tests.integration.pyxis_helpers import importer, pyxis_env, spawn, unsquash_check
from tests.integration.registry_helpers import CKIT, ckit, unique_repo

TRIALS = 20


def layer(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=1)


def oci_layout(path: Path, layers: list[bytes], tag: str = "t") -> Path:
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    diff_ids = ["sha256:" + hashlib.sha256(gzip.decompress(x)).hexdigest() for x in layers]
    config = put(json.dumps({"architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
                             "config": {"Env": ["A=1"], "Cmd": ["/bin/sh"]},
                             "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode())
    manifest = put(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **put(x)} for x in layers],
    }).encode())
    (path / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest,
         "annotations": {"org.opencontainers.image.ref.name": tag}}]}))
    return path


def push_image(registry_host: str, work: Path, *, megabytes: int = 1, seed: int = 0) -> str:
    """A synthetic image (random, incompressible files in two layers) pushed to the plain registry."""
    rng = random.Random(seed)
    layers = [layer({f"data/{i}-{n}.bin": rng.randbytes(megabytes * (1 << 20) // 8) for n in range(4)})
              for i in range(2)]
    layout = oci_layout(work / f"layout-{seed}", layers)
    ref = f"{registry_host}/{unique_repo('cache')}:1"
    pushed = ckit("push", f"oci:{layout}:t", ref)
    assert pushed.returncode == 0, pushed.stderr
    return ref


def shared_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


def own(cache: Path) -> Path:
    """This user's tree of a cache folder (where its conversions go)."""
    return cache / f"u{os.geteuid()}"


def wait_for_lease(tree: Path, proc: subprocess.Popen[str], limit: float) -> None:
    """Until a conversion's lease is in ``tree`` (or the process ended, or ``limit`` seconds passed)."""
    deadline = time.monotonic() + limit
    while not list((tree / "locks").glob("*.lease")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)


def final_files(cache: Path) -> list[Path]:
    return [p for p in (own(cache) / "artifacts").glob("*.sqsh") if not p.name.startswith(".")]


def test_kill_9_at_random_moments_never_serves_a_partial_file(registry, tmp_path: Path) -> None:
    seed = int(os.environ.get("CKIT_KILL_SEED") or time.time_ns() % 2**32)
    print(f"kill -9 trials: seed {seed} (rerun with CKIT_KILL_SEED={seed})")
    rng = random.Random(seed)
    ref = push_image(registry.host, tmp_path, megabytes=24, seed=seed % 1000)
    uri = f"docker://{ref.replace('/', '#', 1)}"
    home = shared_folder(tmp_path, "home")
    reference_cache = shared_folder(tmp_path, "reference")
    began = time.monotonic()
    clean = importer("get", uri, env=pyxis_env(home, reference_cache))
    cold = time.monotonic() - began
    assert clean.returncode == 0, clean.stderr
    expected = hashlib.sha256(Path(clean.stdout.strip()).read_bytes()).hexdigest()
    outcomes: dict[str, int] = {}
    for trial in range(TRIALS):
        cache = shared_folder(tmp_path, f"trial{trial}")
        killed_env = pyxis_env(home, cache, job=1000 + trial)
        proc = spawn("get", uri, env=killed_env)
        if trial % 2:  # half the kills land in the conversion itself: after its lease appears, whatever the load
            wait_for_lease(own(cache), proc, 60)
            delay = rng.uniform(0.0, cold * 0.3)
        else:
            delay = rng.uniform(0.05, cold * 1.1)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        state = ("finished" if proc.returncode == 0 else "during conversion" if list((own(cache) / "locks").glob("*.lease"))
                 else "before or between steps")
        outcomes[state] = outcomes.get(state, 0) + 1
        why = f"seed {seed}, trial {trial}, killed after {delay:.2f} s ({state})"
        for path in final_files(cache):  # whatever sits at a final name is complete
            assert hashlib.sha256(path.read_bytes()).hexdigest() == expected, why
        if trial % 2:  # pyxis's cleanup after the kill: release, twice
            for _ in range(2):
                assert importer("release", env=killed_env).returncode == 0, why
        after = importer("get", uri, env=pyxis_env(home, cache, job=2000 + trial))
        assert after.returncode == 0, f"{why}: {after.stderr}"
        served = Path(after.stdout.strip())
        assert hashlib.sha256(served.read_bytes()).hexdigest() == expected, why
        unsquash_check(served)
        leftovers = [p.name for p in (own(cache) / "artifacts").glob(".*")] + [p.name for p in (own(cache) / "work").glob("*")]
        assert leftovers == [], f"{why}: {leftovers}"
    print(f"kill -9 trials: {outcomes}")
    assert outcomes.get("during conversion", 0) >= 3, f"seed {seed}: too few kills hit a conversion: {outcomes}"


def test_eviction_under_concurrent_readers_loses_nothing_in_use(registry, tmp_path: Path) -> None:
    refs = [push_image(registry.host, tmp_path, seed=100 + n) for n in range(3)]
    cache = shared_folder(tmp_path, "cache")
    home = shared_folder(tmp_path, "home")
    done, failures, evicted = threading.Event(), [], []

    envs = {(n, cycle): pyxis_env(shared_folder(home, f"r{n}c{cycle}"), cache, job=50 + n, step=cycle)
            for n in range(4) for cycle in range(4)}  # written before the threads start: no one rewrites them

    def reader(n: int) -> None:
        for cycle in range(4):
            env = envs[(n, cycle)]
            got = importer("get", f"docker://{refs[(n + cycle) % 3].replace('/', '#', 1)}", env=env)
            if got.returncode != 0:
                failures.append(got.stderr)
                continue
            path = Path(got.stdout.strip())
            for _ in range(3):  # the step's container is being created from this file: it must stay
                if not path.is_file():
                    failures.append(f"{path} vanished while held (reader {n}, cycle {cycle})")
                    break
                unsquash_check(path)
                time.sleep(0.1)
            importer("release", env=env)

    def evictor() -> None:
        while not done.is_set():
            pruned = ckit("cache", "prune", "--cache", str(cache), "--max-size", "0", "--json")
            if pruned.returncode != 0:
                failures.append(pruned.stderr)
                return
            evicted.extend(json.loads(pruned.stdout)["evicted"])

    readers = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    pruner = threading.Thread(target=evictor)
    pruner.start()
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join()
    done.set()
    pruner.join()
    assert failures == []
    assert evicted, "the evictor never evicted anything: the test proved nothing"
    final = ckit("cache", "prune", "--cache", str(cache), "--max-size", "0", "--json")
    assert json.loads(final.stdout)["total_size"] == 0  # released: all of it may go now
    listing = ckit("cache", "ls", "--cache", str(cache), "--json")
    assert json.loads(listing.stdout)["entries"] == []


SPIN = """
import sys, time
from pathlib import Path
from buildkit.storage.store import Store
store = Store(Path(sys.argv[1]))
lease = store.lock(sys.argv[2])
lease.__enter__()
print("held", flush=True)
while True:  # a converter gone wrong: 100 % CPU, no progress
    pass
"""


def spinning_holder(root: Path, key: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", SPIN, str(root), key], stdout=subprocess.PIPE, text=True)  # noqa: S603
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_stuck_converter_does_not_wedge_the_local_store(tmp_path: Path) -> None:
    """Issue 11 item 5: a lock holder at 100 % CPU blocked every later conversion of that image (fcntl lock)."""
    from buildkit.image.convert import plan

    layout = oci_layout(tmp_path / "layout", [layer({"hello.txt": b"hi\n"})])
    key = plan(f"oci:{layout}:t", "sqsh").key
    root = tmp_path / "store"
    spinner = spinning_holder(root, key)
    try:
        began = time.monotonic()
        done = subprocess.run([CKIT, "convert", f"oci:{layout}:t", "--to", "sqsh", "--json"], capture_output=True,  # noqa: S603
                              text=True, timeout=90, check=False, cwd=tmp_path,
                              env={**os.environ, "CKIT_CACHE_DIR": str(root), "CKIT_LOCK_STALE_SECONDS": "3"})
        assert done.returncode == 0, done.stderr
        assert 3 <= time.monotonic() - began < 60
        assert json.loads(done.stdout)["cache_hit"] is False
        unsquash_check(Path(json.loads(done.stdout)["path"]))
    finally:
        spinner.kill()
        spinner.wait()


def test_a_stuck_converter_does_not_wedge_the_cluster_cache(registry, tmp_path: Path) -> None:
    ref = push_image(registry.host, tmp_path, seed=7)
    cache = shared_folder(tmp_path, "cache")
    home = shared_folder(tmp_path, "home")
    host, repo_tag = ref.split("/", 1)
    repo = repo_tag.split(":")[0]
    manifest_digest = RegistryClient(host).head_manifest(repo, "1").digest
    spinner = spinning_holder(own(cache), image_ref_name(host, repo, manifest_digest, "sqsh", "zstd:-3"))
    try:
        env = pyxis_env(home, cache, extra={"CKIT_LOCK_STALE_SECONDS": "3"})
        got = importer("get", f"docker://{host}#{repo_tag}", env=env, timeout=90)
        assert got.returncode == 0, got.stderr
        unsquash_check(Path(got.stdout.strip()))
    finally:
        spinner.kill()
        spinner.wait()
    assert spinner.returncode == -signal.SIGKILL


def test_release_after_a_killed_get_frees_its_lease_at_once(registry, tmp_path: Path) -> None:
    """Pyxis calls release after the step was SIGKILLed: the dead get's lease goes, the next get need not wait."""
    ref = push_image(registry.host, tmp_path, megabytes=24, seed=11)
    uri = f"docker://{ref.replace('/', '#', 1)}"
    cache = shared_folder(tmp_path, "cache")
    home = shared_folder(tmp_path, "home")
    env = pyxis_env(home, cache, job=77, extra={"CKIT_LOCK_STALE_SECONDS": "600"})
    proc = spawn("get", uri, env=env)
    wait_for_lease(own(cache), proc, 60)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    for _ in range(2):
        released = importer("release", env=env)
        assert (released.returncode, released.stdout) == (0, "")
    assert list((own(cache) / "locks").glob("*.lease")) == []
    began = time.monotonic()
    again = importer("get", uri, env=pyxis_env(home, cache, job=78, extra={"CKIT_LOCK_STALE_SECONDS": "600"}))
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - began < 60  # not the 600 s a lease of a live-looking holder would need
    unsquash_check(Path(again.stdout.strip()))


def test_the_importer_evicts_beyond_max_size_but_never_an_image_a_step_holds(registry, tmp_path: Path) -> None:
    refs = [push_image(registry.host, tmp_path, seed=200 + n) for n in range(3)]  # ~1 MiB each
    cache = shared_folder(tmp_path, "cache")
    home = shared_folder(tmp_path, "home")
    paths, envs = [], []
    for n, ref in enumerate(refs):
        env = pyxis_env(home, cache, job=600 + n)
        Path(env["CKIT_IMPORTER_CONFIG"]).write_text(f"cache: {cache}\nmax_size: 1.5M\n")
        got = importer("get", f"docker://{ref.replace('/', '#', 1)}", env=env)
        assert got.returncode == 0, got.stderr
        paths.append(Path(got.stdout.strip()))
        envs.append(env)
        if n == 1:  # two images exceed 1.5 MiB, but the first one's step still holds it
            assert "evicted" not in got.stderr and paths[0].is_file()
            assert importer("release", env=envs[0]).returncode == 0
    assert "evicted" in got.stderr and not paths[0].exists()  # released and least recently used
    assert paths[1].is_file() and paths[2].is_file()  # held: kept although the cache is over its size
