"""Property tests over every parser of untrusted input (see hostile_properties.py), in a child process: only clear
errors, every example within its deadline, and the whole run within the memory ceiling."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.integration.adversary import MEMORY_CEILING, spawn
from tests.integration.hostile_properties import PROPERTIES

ROOT = Path(__file__).resolve().parents[2]


def test_parsers_of_untrusted_input_raise_only_clear_errors_in_bounded_memory() -> None:
    ran = spawn([sys.executable, "-m", "tests.integration.hostile_properties"], cwd=ROOT, timeout=600,
                env={"CKIT_PROPERTY_EXAMPLES": "150"})
    assert not ran.timed_out, ran.stdout + ran.stderr[-3000:]
    assert ran.returncode == 0, ran.stdout + ran.stderr[-5000:]
    assert ran.stdout.count("only clear errors") == len(PROPERTIES), ran.stdout
    assert ran.max_rss < MEMORY_CEILING, f"peak memory {ran.max_rss >> 20} MiB"


def test_mutated_layers_through_the_cli_give_a_valid_image_or_one_clear_error(tmp_path: Path) -> None:
    """Random byte edits of a real layer, converted by ``ckit convert``: exit 0 with an image ``unsquashfs``
    reads, or a clear error (exit 1, 2 or 4); the seed is printed."""
    import os
    import random
    import subprocess

    from tests.integration.adversary import clean_failure, run
    from tests.integration.hostile_images import oci_layout
    from tests.integration.hostile_properties import SEED_TAR

    seed = int(os.environ.get("CKIT_TEST_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"mutated layers: seed {seed} (CKIT_TEST_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    outcomes = {"image": 0, "error": 0}
    for trial in range(12):
        data = bytearray(SEED_TAR)
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(data))
            data[at:at + 4] = rng.randbytes(rng.randint(1, 4))
        if rng.random() < 0.3:
            data = data[:rng.randrange(len(data))]
        source = oci_layout(tmp_path / f"layout{trial}", [bytes(data)], compress=rng.random() < 0.5)
        out = tmp_path / f"out{trial}.sqsh"
        ran = run("convert", source, "--to", "sqsh", "-o", str(out), env={"CKIT_CACHE_DIR": str(tmp_path / "c")},
                  timeout=60)
        if ran.returncode == 0:
            listed = subprocess.run(["unsquashfs", "-lls", str(out)], capture_output=True, text=True,  # noqa: S607
                                    errors="replace", check=False)  # a mutated name need not be UTF-8
            assert listed.returncode == 0, f"trial {trial}: ckit wrote an image unsquashfs rejects: {listed.stderr}"
            outcomes["image"] += 1
        else:
            clean_failure(ran, 1, 2, 4, says="layer 1 (")  # the layer it could not convert
            assert not out.exists()
            outcomes["error"] += 1
    print(f"mutated layers: {outcomes}")
