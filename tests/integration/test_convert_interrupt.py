"""SIGKILL at random moments and concurrent runs: never a partial file at a final path, work done once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from buildkit.image.convert import verifier
from buildkit.storage.store import Store

TRIALS = 6


@pytest.fixture(scope="module")
def debian_archive(debian_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("interrupt") / "debian.tar"
    with path.open("wb") as out:
        for chunk in docker.from_env().images.get(debian_image).save(named=True):
            out.write(chunk)
    return path


def ckit_argv(source: str, out: Path, target: str = "sqsh") -> list[str]:
    return [sys.executable, "-m", "buildkit.cli", "convert", source, "--to", target, "-o", str(out), "--json"]


def test_sigkill_leaves_no_partial_file_and_the_next_run_succeeds(debian_archive: Path, tmp_path: Path) -> None:
    seed = int(os.environ.get("CKIT_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"SIGKILL trials: seed {seed} (CKIT_TEST_SEED={seed} repeats the kill moments)")
    rng = random.Random(seed)
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    source = f"docker-archive:{debian_archive}"
    # kill inside the window a whole conversion takes on this machine (measured, not guessed)
    started = time.monotonic()
    subprocess.run(ckit_argv(source, tmp_path / "timing.sqsh"),  # noqa: S603
                   env={**env, "CKIT_CACHE_DIR": str(tmp_path / "timing-cache")}, capture_output=True, check=True)
    window = time.monotonic() - started
    killed = 0
    for trial in range(TRIALS):
        target = ("sqsh", "sif")[trial % 2]
        out = tmp_path / f"out-{trial}.{target}"
        # a distinct compression level per trial: a distinct store key, so every trial does real work
        argv = ckit_argv(source, out, target) + ["--compress", f"zstd:{trial + 1}"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # noqa: S603
                                start_new_session=True)
        time.sleep(rng.uniform(0.05, 0.85) * window)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            killed += 1
        proc.wait()
        if out.exists():  # it finished (or renamed) before the kill: then it is complete
            verifier(target)(out)
        assert not [p for p in tmp_path.glob(f"out-{trial}*") if p != out]
        for artifact in Store(tmp_path / "cache").entries():
            verifier(artifact.meta["target"])(artifact.path)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)  # noqa: S603
        assert done.returncode == 0, f"seed {seed}, trial {trial}: {done.stderr}"
        verifier(target)(out)
        # the next producer of the key removed what the killed one left (temp files, scratch space)
        assert not [p for p in (tmp_path / "cache" / "artifacts").iterdir() if p.name.endswith(".tmp")]
        assert not list((tmp_path / "cache" / "work").iterdir())
    assert killed >= TRIALS // 2, f"seed {seed}: the conversions finished before the kills: shorten the window"


def test_two_concurrent_converts_do_the_work_once(debian_archive: Path, tmp_path: Path) -> None:
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    source = f"docker-archive:{debian_archive}"
    outs = [tmp_path / "a.sqsh", tmp_path / "b.sqsh"]
    procs = [subprocess.Popen(ckit_argv(source, out), env=env, stdout=subprocess.PIPE,  # noqa: S603
                              stderr=subprocess.PIPE, text=True) for out in outs]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        results.append(json.loads(stdout))
    assert sorted(r["cache_hit"] for r in results) == [False, True]
    assert len(Store(tmp_path / "cache").entries()) == 1
    assert outs[0].read_bytes() == outs[1].read_bytes()
    verifier("sqsh")(outs[0])


def test_ctrl_c_on_the_process_group_is_an_interrupt_not_a_tool_failure(debian_archive: Path, tmp_path: Path) -> None:
    """A terminal's Ctrl-C: exit 130, 'interrupted', no file, whatever the phase: the interrupt is sent once the
    conversion has reached it (its file in the store has appeared: reading layers; holds a quarter, then half of
    the size the whole file has: compressing on the writer's threads), never after a guessed share of a timed
    window, so a loaded machine moves nothing but the wait."""
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    whole = tmp_path / "whole.sqsh"
    subprocess.run(ckit_argv(f"docker-archive:{debian_archive}", whole),  # noqa: S603
                   env={**env, "CKIT_CACHE_DIR": str(tmp_path / "whole-cache")}, capture_output=True, check=True)
    size = whole.stat().st_size
    interrupted = 0
    for n, share in enumerate((0.0, 0.25, 0.5)):
        out = tmp_path / f"out-{n}.sqsh"
        argv = ckit_argv(f"docker-archive:{debian_archive}", out) + ["--compress", f"zstd:{n + 1}"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,  # noqa: S603
                                text=True, start_new_session=True)
        if not _wait_for_partial(tmp_path / "cache", int(share * size), proc):
            continue  # it finished before it got there (a fast run and a small share): nothing to interrupt
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        assert "interrupted" in stderr and "stopped reading" not in stderr
        assert not out.exists()
        assert not list((tmp_path / "cache").rglob("*.tmp")), "a partial file was left in the store"
        interrupted += 1
    assert interrupted >= 2, "the conversions finished before the interrupts"


def _wait_for_partial(cache: Path, least: int, proc: subprocess.Popen[str]) -> bool:
    """Until the conversion's file in the store (``*.tmp``) exists and holds ``least`` bytes; False when the
    process ended first."""
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        for part in cache.rglob("*.tmp"):
            try:
                if part.stat().st_size >= least:
                    return True
            except FileNotFoundError:
                pass  # renamed into place between the listing and the stat
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("entry", ["buildkit.cli", "buildkit.importer.pyxis"])
def test_an_interrupt_handled_after_it_left_an_exec_still_exits_130(entry: str, tmp_path: Path) -> None:
    """A Ctrl-C that lands while a late import builds a dataclass (``exec`` of a string) is handled like any
    other: CPython's memory of it must not turn the exit into a death by SIGINT. Run with ``-m``, as the tests
    and ``python -m buildkit.cli`` do: a script's ``sys.exit`` ends the interpreter another way."""
    script = tmp_path / "late.py"
    script.write_text(f"import {entry} as entry\n\n"
                      "def main(*args):\n"
                      "    try:\n"
                      "        exec('raise KeyboardInterrupt')\n"
                      "    except KeyboardInterrupt:\n"
                      "        return 130\n\n"
                      "entry.main = main\n"
                      "entry.run()\n")
    done = subprocess.run([sys.executable, "-m", "late"], cwd=tmp_path, capture_output=True, text=True,  # noqa: S603
                          check=False)
    assert done.returncode == 130, done.stderr
