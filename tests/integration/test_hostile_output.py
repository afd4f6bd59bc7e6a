"""Terminal escapes in text from outside ckit, run through the real CLI: shown escaped, never acting.

A co-tenant names a job ``\\e]52;…`` (an OSC 52 clipboard write), puts an OSC 0 title, a CSI clear screen, a bare
CR or a bidi override in a shared site profile or in a cache entry's metadata. Every command's human output
shows them as ``\\x1b…``; ``--json`` and the files ckit writes keep them exact. A job name with ``|`` or a
newline keeps ``ckit jobs``'s columns (squeue's answer is parsed by a separator no name can hold).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.adversary import Ran, clean_failure, run

EVIL = "ok \x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x1b\\\x1b[2J\rHIDDEN \x9b31m\u202etxt.exe"
EVIL_SHOWN = "ok \\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b]0;pwned\\x1b\\\\x1b[2J\\rHIDDEN \\x9b31m\\u202etxt.exe"


def inert(text: str) -> bool:
    """Nothing a terminal acts on: no C0 control but newline and tab, no DEL, no C1, no bidi control."""
    return not any(ord(c) < 32 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F or c in "\u202a\u202b\u202c\u202d"
                   "\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c" for c in text)


def human(ran: Ran) -> None:
    assert ran.returncode == 0, ran.stderr
    assert inert(ran.stdout), repr(ran.stdout)
    assert inert(ran.stderr), repr(ran.stderr)


@pytest.fixture()
def sites(tmp_path: Path) -> Path:
    folder = tmp_path / "sites"
    folder.mkdir()
    (folder / "evil.yaml").write_text(json.dumps({
        "name": "evil", "description": EVIL, "scheduler": "slurm", "partitions": {"debug": {"cpus_per_node": 2}},
        "default_partition": "debug", "runtimes": [{"kind": "none"}], "env": {"BANNER": EVIL},
        "shared_image_dir": None, "compute_internet": True}))
    return folder


def test_sites_show_a_profiles_text_escaped_and_json_exact(sites: Path) -> None:
    listed = run("--sites", str(sites), "sites")
    human(listed)
    assert f"evil    slurm  {EVIL_SHOWN}\n" in listed.stdout
    shown = run("--sites", str(sites), "sites", "show", "evil")
    human(shown)
    assert f"evil: {EVIL_SHOWN}\n" in shown.stdout and f"env: BANNER={EVIL_SHOWN}\n" in shown.stdout
    exact = run("--sites", str(sites), "sites", "--json")
    assert [s["description"] for s in json.loads(exact.stdout) if s["name"] == "evil"] == [EVIL]


def test_launch_dry_run_shows_the_script_escaped_and_writes_it_exact(sites: Path, tmp_path: Path) -> None:
    args = ("--sites", str(sites), "launch", "--site", "evil", "-J", "banner")
    dry = run(*args, "--dry-run", "--", "printf", "%s\\n", EVIL)
    human(dry)
    assert f"export BANNER='{EVIL_SHOWN}'\n" in dry.stdout
    as_json = run(*args, "--dry-run", "--json", "--", "printf", "%s\\n", EVIL)
    assert f"export BANNER='{EVIL}'\n" in json.loads(as_json.stdout)["text"]
    script = tmp_path / "banner.sbatch"
    written = run(*args, "--no-submit", "--script", str(script), "--", "printf", "%s\\n", EVIL)
    human(written)
    text = script.read_bytes().decode()  # not read_text: universal newlines would turn the CR into a newline
    assert f"export BANNER='{EVIL}'\n" in text  # the script is the exact script
    export = next(line for line in text.split("\n") if line.startswith("export BANNER="))
    done = subprocess.run(["bash", "-c", f'{export}; printf "%s" "$BANNER"'],  # noqa: S603, S607
                          capture_output=True, check=True)
    assert done.stdout.decode() == EVIL  # and bash reads it back as it was


@pytest.mark.parametrize("flag", ["-J", "--comment", "--partition", "--account"])
def test_a_job_name_with_control_characters_is_refused_and_shown_escaped(sites: Path, flag: str) -> None:
    """Slurm takes any byte in a job name (and squeue prints it raw); an #SBATCH line would end at a newline
    and take what follows as another directive: ckit refuses them, naming the value escaped."""
    ran = run("--sites", str(sites), "launch", "--site", "evil", flag, "x\n#SBATCH --uid=0\x1b]0;t\x07",
              "--dry-run", "--", "true")
    clean_failure(ran, 2, says="'x\\n#SBATCH --uid=0\\x1b]0;t\\x07': only letters, digits")
    assert inert(ran.stderr)


def test_a_site_named_with_a_last_newline_is_refused(tmp_path: Path) -> None:
    """The name pattern ^[a-z][a-z0-9_-]*$ took "evil\n" (Python's $ matches before a last newline): the job
    script's comment line ended after the name, and ckit's next words ran as a command."""
    folder = tmp_path / "sites"
    folder.mkdir()
    (folder / "evil\n.yaml").write_text(json.dumps({
        "name": "evil\n", "description": "d", "scheduler": "slurm", "partitions": {"debug": {"cpus_per_node": 2}},
        "default_partition": "debug", "runtimes": [{"kind": "none"}], "shared_image_dir": None,
        "compute_internet": True}))
    ran = run("--sites", str(folder), "launch", "--site", "evil\n", "--dry-run", "--", "true")
    clean_failure(ran, 2, says="'evil\\n' does not match the expected form at 'name'")
    assert "# ckit launch" not in ran.stdout


def test_cache_ls_shows_a_cached_images_source_escaped(tmp_path: Path) -> None:
    """A co-tenant's tree in the shared cache: its records say where an image came from, in any bytes."""
    artifacts = tmp_path / "cache" / f"u{os.getuid()}" / "artifacts"  # a user's tree of the cache
    artifacts.mkdir(parents=True)
    key = "a" * 64
    (artifacts / f"{key}.json").write_text(json.dumps({"key": key, "target": "sqsh", "source": EVIL}))
    (artifacts / f"{key}.sqsh").write_bytes(b"hsqs")
    listed = run("cache", "ls", "--cache", str(tmp_path / "cache"))
    human(listed)
    assert listed.stdout.startswith("aaaaaaaaaaaa  ") and listed.stdout.rstrip("\n").endswith(EVIL_SHOWN)
    exact = json.loads(run("cache", "ls", "--cache", str(tmp_path / "cache"), "--json").stdout)
    assert [(e["key"], e["source"]) for e in exact["entries"]] == [(key, EVIL)]


def test_errors_and_usage_errors_quote_input_escaped(sites: Path, tmp_path: Path) -> None:
    missing = run("--sites", str(sites), "sites", "show", "x\x1b]0;t\x07")
    clean_failure(missing, 2, says="x\\x1b]0;t\\x07")
    assert inert(missing.stderr)
    unknown = run("--\u202eoption\x1b[2J")
    assert unknown.returncode == 2 and "--\\u202eoption\\x1b[2J" in unknown.stderr and inert(unknown.stderr)
    folder = tmp_path / "a\x1b]0;t\x07"
    folder.mkdir()
    (folder / "x.sif").write_bytes(b"not an image")
    unreadable = run("inspect", str(folder / "x.sif"))
    clean_failure(unreadable, 1, 2, says="a\\x1b]0;t\\x07/x.sif: neither a SIF image")
    assert inert(unreadable.stderr)


@pytest.fixture()
def hostile_jobs(slurm, tmp_path: Path) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    """Two running or pending jobs of a co-tenant, named to break a table and a terminal."""
    names = ["a|b|RUNNING|debug\n99|RUNNING|debug|1|0:01|n1|root|fake", EVIL]
    ids = {}
    for name in names:
        done = subprocess.run(["sbatch", "--parsable", "-J", name, "-o", str(tmp_path / "%j.out"),  # noqa: S603, S607
                               "--wrap", "sleep 300"], capture_output=True, text=True, check=True)
        ids[done.stdout.strip().split(";")[0]] = name
    try:
        yield ids
    finally:
        subprocess.run(["scancel", *ids], check=False)  # noqa: S603, S607


def test_jobs_keeps_its_columns_whatever_the_names(hostile_jobs: dict[str, str]) -> None:
    listed = run("jobs", "--all")
    human(listed)
    rows = [line for line in listed.stdout.splitlines()[1:] if line.split()[0] in hostile_jobs]
    assert sorted(row.split()[0] for row in rows) == sorted(hostile_jobs)  # one line each, no forged one
    cells = {row.split()[0]: (row[10:26], row[27:38].strip(), row[39:49].strip()) for row in rows}
    pipes, escapes = hostile_jobs
    assert cells[pipes][0] == "a|b|RUNNING|debu" and cells[escapes][0] == EVIL_SHOWN[:16]
    assert all(state in ("RUNNING", "PENDING") and partition == "debug" for _, state, partition in cells.values())
    exact = json.loads(run("jobs", "--all", "--json").stdout)["jobs"]
    assert {j["job_id"]: j["name"] for j in exact if j["job_id"] in hostile_jobs} == hostile_jobs
    assert all(j["state"] in ("RUNNING", "PENDING") and j["partition"] == "debug" for j in exact
               if j["job_id"] in hostile_jobs)
