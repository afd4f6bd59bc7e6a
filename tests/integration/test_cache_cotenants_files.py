"""A hostile co-tenant against another user's cache, store and job folder, with files alone: two real Unix users
(``ckit-victim``, ``ckit-attacker``), each running ckit's own cache code as themselves
(:mod:`tests.integration.cotenant_driver`), in folders made as the admin guide says. Each test replays an attack
that worked (lock-out, forced eviction, a permanent pin, a squatted cache folder, code run through a job folder,
readable private images and names) and shows it fails. No registry, no scheduler: the images are files ckit
publishes as a conversion would."""

from __future__ import annotations

import json
import os
import pickle
import secrets
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.errors import ConfigError, LaunchError
from tests.infra.users import NAMES, User, as_user, ensure
from tests.integration import cotenants as co

PYTHON = "/usr/bin/python3"  # every user can run it (the test's venv may lie in root's home)
DRIVER = str(Path(__file__).with_name("cotenant_driver.py"))
REPO = str(Path(__file__).parents[2])
MARK = f"ckit-cotenant-files-{secrets.token_hex(6)}"  # in the environment of every process the tests start


def _marked() -> list[int]:
    """Processes alive with this module's mark in their environment (other than this one)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"CKIT_TEST_MARK={MARK}".encode() in environ.split(b"\0") and int(pid) != os.getpid():
            found.append(int(pid))
    return found


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """A folder every user can traverse; at the end, no process the tests started is left behind."""
    yield from co.shared_base()
    for name in NAMES:
        subprocess.run(["rm", "-rf", str(personal(ensure(name)))], check=False)  # noqa: S603,S607
    assert _marked() == [], "processes the tests started outlived them"


def personal(user: User) -> Path:
    """The user's personal store in these tests (removed at the end)."""
    return user.home / ".cache" / MARK


def run(user: User, *args: str, store: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = user.env(PYTHONPATH=REPO, CKIT_TEST_MARK=MARK, CKIT_CACHE_DIR=str(store or personal(user)))
    return as_user(user, [PYTHON, DRIVER, *args], env=env, timeout=120)


def ok(done: subprocess.CompletedProcess[str]) -> dict | list:  # type: ignore[type-arg]
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def as_root(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": REPO, "CKIT_TEST_MARK": MARK,
           "CKIT_CACHE_DIR": os.environ["CKIT_CACHE_DIR"]}
    return subprocess.run([PYTHON, DRIVER, *args], env=env, capture_output=True, text=True, timeout=120,  # noqa: S603
                          check=False)


def shell(user: User, script: str) -> None:
    done = as_user(user, ["sh", "-c", script], env=user.env(CKIT_TEST_MARK=MARK))
    assert done.returncode == 0, done.stderr


def test_a_tree_made_under_her_name_locks_her_out_of_nothing(victim: User, attacker: User, base: Path) -> None:
    """(2) The attacker makes ``u<victim>`` before her first use. She is served what root staged, converts what is
    missing into her personal store, and ``cache ls`` tells her why."""
    cache = co.cache_folder(base, "lockout")
    staged = ok(as_root("put", str(cache), "staged"))
    shell(attacker, f"mkdir -m 755 {cache}/u{victim.uid}")
    got = ok(run(victim, "get", str(cache), "staged"))
    assert got["path"] == staged["path"] and got["converted"] == "no"
    own = ok(run(victim, "get", str(cache), "new"))
    assert own["converted"] == "yes" and Path(own["path"]).is_relative_to(personal(victim))
    listing = ok(run(victim, "ls", str(cache)))
    assert any(f"u{victim.uid}: it belongs to uid {attacker.uid}" in note and "personal store" in note
               for note in listing["notes"]), listing["notes"]


def test_another_users_claims_make_nobody_evict(victim: User, attacker: User, base: Path) -> None:
    """(3) A sparse 1 TiB image (next to no disk) and a use stamp in 2100 in the attacker's tree: the victim's
    eviction to 1 TiB removes nothing of hers, and her listing shows neither the claimed size nor a future use."""
    cache = co.cache_folder(base, "evict")
    huge = ok(run(attacker, "put", str(cache), "huge", str(1 << 40)))
    used = f"{cache}/u{attacker.uid}/used"
    shell(attacker, f"mkdir -p {used} && touch -d 2100-01-01 {used}/{huge['key']}")
    mine = [ok(run(victim, "put", str(cache), name))["key"] for name in ("a", "b")]
    assert ok(run(victim, "evict", str(cache), str(1 << 40))) == []
    listing = ok(run(victim, "ls", str(cache)))
    sizes = {e["key"]: e["size"] for e in listing["entries"]}
    assert set(mine) <= set(sizes) and sizes[huge["key"]] < 1 << 20
    assert all(e["last_used"] <= int(os.path.getmtime(cache)) + 3600 for e in listing["entries"])


def test_a_forged_hold_pins_nothing(victim: User, attacker: User, base: Path) -> None:
    """(4) Holds dated 2100 and 31 links in the attacker's tree on the victim's image: her prune to 0 removes it,
    and so does root's."""
    cache = co.cache_folder(base, "pin")
    ok(run(attacker, "put", str(cache), "theirs"))
    for user, name in ((victim, "a"), (attacker, "b")):
        key = ok(run(user, "put", str(cache), name))["key"]
        holds = f"{cache}/u{attacker.uid}/holds/{key}"
        links = " && ".join(f"ln -s /etc/passwd {holds}/l{n}" for n in range(31))
        shell(attacker, f"mkdir -p {holds} && touch -d 2100-01-01 {holds}/1.0@n && {links}")
    assert len(ok(run(victim, "evict", str(cache), "0"))) == 1
    assert len(ok(as_root("evict", str(cache), "0"))) == 2  # root's prune: the attacker's own images too


def test_a_cache_folder_someone_else_made_in_a_shared_folder_is_refused(victim: User, attacker: User,
                                                                         base: Path) -> None:
    """(5) The configured cache does not exist yet under a folder every user may write: the attacker makes it (or
    a link to a folder of his) with his image under the name the victim asks for. She is refused, with a message
    for the admin, and never served his image; root's staging into it is refused the same way."""
    scratch = co.cache_folder(base, "scratch")
    shell(attacker, f"mkdir -m 1777 {scratch}/cache {scratch}/his && ln -s {scratch}/his {scratch}/link")
    for name in ("cache", "his"):
        ok(run(attacker, "put", f"{scratch}/{name}", "x"))
    for name in ("cache", "link"):
        got = run(victim, "get", f"{scratch}/{name}", "x")
        assert got.returncode == 2 and got.stdout == "", got.stderr
        assert f"belongs to uid {attacker.uid}" in got.stderr and "make the cache folder as root" in got.stderr
    staged = as_root("put", f"{scratch}/cache", "y")
    assert staged.returncode == 2 and "anyone could have made it" in staged.stderr, staged.stderr
    fresh = ok(run(victim, "put", f"{scratch}/mine", "z"))  # a folder she makes there herself is hers
    assert Path(fresh["path"]).is_relative_to(scratch / "mine" / f"u{victim.uid}")


def test_private_images_and_their_names_stay_their_users(victim: User, attacker: User, base: Path) -> None:
    """(6, 7) An image pulled with credentials: 0600 in the victim's tree, its record and its repository's name in
    a folder only she can open; her personal store 0700 (also when it was made 0755 before)."""
    cache = co.cache_folder(base, "closed")
    got = ok(run(victim, "put", str(cache), "registry.example+priv+secret", "--private"))
    assert stat.S_IMODE(os.stat(got["path"]).st_mode) == 0o600
    listed = as_user(attacker, ["find", str(cache)], env=attacker.env(CKIT_TEST_MARK=MARK))
    assert "secret" not in listed.stdout and f"u{victim.uid}/artifacts" in listed.stdout
    assert ok(run(victim, "get", str(cache), "registry.example+priv+secret"))["path"] == got["path"]
    store = co.cache_folder(base, "stores", 0o755) / "victim"
    store.mkdir(mode=0o755)
    co.owned_by(store, victim)
    ok(run(victim, "put", str(base / "nowhere-she-may-write"), "p", "--private", store=store))
    for folder in (store, store / "artifacts", store / "locks"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert as_user(attacker, ["ls", str(store / "artifacts")]).returncode != 0


class Planted:
    """What the attacker's pickle would run: a file written as whoever unpickles it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_job_folder_others_can_write_runs_nobodys_code(attacker: User, base: Path, tmp_path: Path) -> None:
    """(1) ckit.Executor (run here by root, the victim) in a folder the attacker opened to all, or made in a
    sticky shared folder: refused. A result pickle of his in her own folder: not unpickled. The job itself checks
    its folder before it unpickles anything."""
    import ckit  # submitit is a test dependency: a missing one fails here, never skips
    from buildkit.orchestration.executor import BOOTSTRAP, FunctionJob, job_folder

    scratch = co.cache_folder(base, "jobs-scratch")
    shell(attacker, f"mkdir -m 777 {scratch}/open && mkdir -m 755 {scratch}/his")
    for name in ("open", "his"):
        with pytest.raises(ConfigError, match="whoever can write it can run code as you"):
            ckit.Executor(scratch / name, "local", runtime="none", cwd=tmp_path)
    with pytest.raises(ConfigError, match="others may write it"):
        job_folder(scratch, make=True)
    made = job_folder(scratch / "mine", make=True)  # missing in a sticky folder: made hers, 0700
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and made.stat().st_uid == os.geteuid()
    marker = base / "ran-as-victim"
    result = made / "4242_0_result.pkl"
    result.write_bytes(pickle.dumps(("success", Planted(marker))))
    co.owned_by(result, attacker)
    with pytest.raises(LaunchError, match="not unpickled"):
        FunctionJob(folder=made, job_id="4242", tasks=[0]).result()
    assert not marker.exists()
    job = as_root_bootstrap(BOOTSTRAP, scratch / "open")
    assert job.returncode == 3 and "is not this user's alone: not unpickled" in job.stderr, job.stderr


def as_root_bootstrap(bootstrap: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """The job's first step as the victim (root here) in the attacker's folder."""
    env = {"PATH": os.environ["PATH"], "CKIT_TEST_MARK": MARK, "SLURM_JOB_ID": "4242"}
    return subprocess.run([PYTHON, "-c", bootstrap, str(folder), "python=3", "submitit=x", "cloudpickle=x"],  # noqa: S603
                          env=env, capture_output=True, text=True, timeout=60, check=False)
