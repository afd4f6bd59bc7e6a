"""Numbers typed in other scripts' digits, run through the real CLI: refused, with a message naming the value.

``str.isdigit``, ``\\d`` and ``int()`` take ``٣`` (Arabic-Indic three) and ``３`` (fullwidth three) as 3, and
``isdigit`` takes ``²``, which ``int()`` then refuses (an internal ValueError): job ids, compression levels,
Slurm times, node counts, recipe parameters and limits are read in ASCII digits only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.adversary import Ran, clean_failure, run
from tests.integration.hostile_images import END, member, oci_layout

DIGITS = ["\u0663", "\uff13", "\u00b2", "1_2"]  # ٣, ３, ², and int()'s separator


def usage_error(ran: Ran, says: str) -> None:
    """Refused by the option parser: exit 2 and ckit's error line (the option named) and hint, nothing else."""
    assert ran.returncode == 2 and not ran.timed_out, ran.stderr
    assert "Traceback" not in ran.stderr and "ckit: error: ckit " in ran.stderr and "invalid value for '" in ran.stderr and says in ran.stderr, \
        ran.stderr


@pytest.mark.parametrize("digits", DIGITS[:3])  # 1_2 is a job array's task
@pytest.mark.parametrize("command", ["logs", "cancel"])
def test_a_job_id_in_other_digits_is_refused(command: str, digits: str) -> None:
    ran = run(command, digits, timeout=60)
    clean_failure(ran, 2, says=f"{digits!r} is not a Slurm job id")


@pytest.mark.parametrize("digits", DIGITS)
def test_a_compression_level_in_other_digits_is_refused(tmp_path: Path, digits: str) -> None:
    source = oci_layout(tmp_path / "layout", [member("f", b"x") + END])
    ran = run("convert", source, "--to", "sqsh", "--compress", f"zstd:{digits}", "-o", str(tmp_path / "o.sqsh"),
              env={"CKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=60)
    clean_failure(ran, 2, says=f"--compress 'zstd:{digits}': level must be")
    assert not (tmp_path / "o.sqsh").exists()


@pytest.mark.parametrize("flag, value, says", [
    ("-N", "\u0663", "'\u0663' is not a whole number in ASCII digits"),
    ("--gpus-per-node", "\uff12", "'\uff12' is not a whole number in ASCII digits"),
    ("-c", "1_0", "'1_0' is not a whole number in ASCII digits"),
    ("-t", "\u0663:00:00", "--time '\u0663:00:00' is not a Slurm time"),
    ("-t", "1:\u00b2\u00b2:00", "--time '1:\u00b2\u00b2:00' is not a Slurm time"),
])
def test_launch_numbers_in_other_digits_are_refused(flag: str, value: str, says: str) -> None:
    ran = run("launch", "--site", "local", flag, value, "--dry-run", "--", "true", timeout=60)
    if flag == "-t":
        clean_failure(ran, 2, says=says)
    else:
        usage_error(ran, says)


def test_nccl_report_expect_in_other_digits_is_refused(tmp_path: Path) -> None:
    (tmp_path / "job.out").write_text("# Avg bus bandwidth    : 1.5\n")
    ran = run("nccl-report", str(tmp_path / "job.out"), "--expect", "\u0663", timeout=60)
    usage_error(ran, "'\u0663' is not a number in ASCII digits")


def test_a_recipe_parameter_in_other_digits_is_refused(tmp_path: Path) -> None:
    (tmp_path / "addons").mkdir()
    (tmp_path / "stacks").mkdir()
    (tmp_path / "addons" / "count.yaml").write_text(
        "kind: addon\ndescription: a count\nparameters:\n  n: {type: int, default: 1, description: how many}\n"
        "steps:\n  - run: [\"echo {{ n }}\"]\n")
    (tmp_path / "stacks" / "mine.yaml").write_text("kind: stack\ndescription: mine\nbase: debian\naddons: [count]\n")
    assert run("--recipes", str(tmp_path), "show", "mine", "--set", "count.n=3").returncode == 0
    ran = run("--recipes", str(tmp_path), "show", "mine", "--set", "count.n=\u0663", timeout=60)
    clean_failure(ran, 2, says="parameter 'n' expects a whole number in ASCII digits, got '\u0663'")


@pytest.mark.parametrize("digits", ["\u0663\u0660", "\uff13\uff10", "1_0"])
def test_a_limit_in_other_digits_is_refused(tmp_path: Path, digits: str) -> None:
    ran = run("pull", "127.0.0.1:1/team/app:1", "-o", str(tmp_path / "out"), timeout=60,
              env={"CKIT_HTTP_TIMEOUT": digits, "CKIT_CACHE_DIR": str(tmp_path / "cache")})
    clean_failure(ran, 2, says=f"CKIT_HTTP_TIMEOUT={digits!r} is not a number")
