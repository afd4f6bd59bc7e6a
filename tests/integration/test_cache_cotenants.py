"""The cluster cache attacked by a co-tenant: two real Unix users (``ckit-victim``, ``ckit-attacker``), a cache made
as the admin guide says (sticky, every user may write it), the importer run as Pyxis runs it. Each test replays an
attack that worked on the shared layout every user wrote into, and shows it fails now: no code runs as the victim or
root, nothing outside the cache is written or deleted, no user is served another user's image, no get hangs or
exhausts memory on another user's say-so, private images stay their users'."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.image.squashfs.compression import choose
from buildkit.registry.distribution.client import RegistryClient
from buildkit.storage.cache import image_ref_name
from tests.infra.users import User, as_user
from tests.integration import cotenants as co
from tests.integration.adversary import MEMORY_CEILING, spawn
from tests.integration.pyxis_helpers import IMPORTER

SQSH = choose(None, target="sqsh").label


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    yield from co.shared_base()


@pytest.fixture(scope="module")
def images(registry, base: Path) -> dict[str, co.Image]:  # type: ignore[no-untyped-def]
    work = base / "images"
    work.mkdir()
    made = {name: co.push(registry.host, work, name, {"etc/hello": f"genuine {name}\n".encode()},
                          base={"etc/base": b"the base layer\n"}) for name in ("x", "y", "z", "w", "v")}
    made["poison"] = co.push(registry.host, work, "poison", {"etc/hello": b"attacker\n"},
                             base={"etc/base": b"the base layer\n"})
    return made


def env_http() -> dict[str, str]:
    return {"ENROOT_ALLOW_HTTP": "yes"}


def tree(cache: Path, user: User) -> Path:
    return cache / f"u{user.uid}"


def served(done: subprocess.CompletedProcess[str]) -> Path:
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def manifest_digest(image: co.Image) -> str:
    host, repo_tag = image.ref.split("/", 1)
    repo, tag = repo_tag.rsplit(":", 1)
    return RegistryClient(host).head_manifest(repo, tag).digest


def ref_name(image: co.Image) -> str:
    """The name every reader looks an image's record up by (and a lease of its conversion is named after)."""
    host, repo = image.ref.split("/", 1)[0], image.ref.split("/", 1)[1].rsplit(":", 1)[0]
    return image_ref_name(host, repo, manifest_digest(image), "sqsh", SQSH)


def test_links_planted_where_a_reader_writes_are_never_followed(victim: User, attacker: User, base: Path,
                                                                images: dict[str, co.Image]) -> None:
    """The attacker learns the key of an image from their own conversion (every user gets the same key) and links
    the places a reader's hold and use stamp went to the victim's login files; or takes the name of the victim's
    tree first. The victim's get writes nothing through a link; a taken tree is passed over (she converts into her
    personal store, told why), and root's staging into a folder whose ``u0`` is taken says what to do."""
    cache = co.cache_folder(base, "links")
    key = served(co.get(attacker, images["x"], cache, 1, **env_http())).name.split(".")[0]
    profile, bashrc = victim.home / ".bash_profile", victim.home / ".bashrc"
    bashrc_before = bashrc.read_bytes() if bashrc.exists() else None
    co.plant(cache / "used" / key, attacker, link=str(profile))
    for job in range(2, 40):  # job ids are sequential: a range of the victim's next steps
        co.plant(cache / "holds" / key / f"{job}.0@{os.uname().nodename}", attacker, link=str(bashrc))
    path = served(co.get(victim, images["x"], cache, 5, **env_http()))
    assert path.parent == tree(cache, victim) / "artifacts" and co.hello(path) == b"genuine x\n"
    assert not profile.exists() and (bashrc.read_bytes() if bashrc.exists() else None) == bashrc_before
    assert co.world_writable(victim.home) == [] and co.world_writable(tree(cache, victim)) == []
    taken = co.cache_folder(base, "taken")
    co.plant(taken / f"u{victim.uid}", attacker, link=str(victim.home))
    passed_over = co.get(victim, images["x"], taken, 6, **env_http())
    assert served(passed_over).is_relative_to(victim.home / ".cache" / "ckit"), passed_over.stderr
    assert "it is a symbolic link" in passed_over.stderr and "another user made it" in passed_over.stderr
    co.plant(taken / "u0", attacker, link=str(base / "etc-like"))
    (base / "etc-like").mkdir()
    stage = subprocess.run([co.CKIT, "stage", images["x"].ref, "--to", "sqsh", "--dest", str(taken)],  # as root
                           capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **env_http()})
    assert stage.returncode == 2 and "you did not make it" in stage.stderr, stage.stderr
    assert list((base / "etc-like").iterdir()) == []


def test_eviction_removes_only_what_the_store_names_by_key(victim: User, attacker: User, base: Path,
                                                          images: dict[str, co.Image]) -> None:
    """Records naming a path outside the cache (the attacker's own, and one in the shared layout of old) make no
    eviction delete anything but the artifacts the evicting store names by key: not by the victim's prune, not by
    the victim's get with max_size, not by root's prune."""
    cache = co.cache_folder(base, "evict")
    thesis = victim.home / "thesis.tex"
    thesis.write_text("four years of work\n")
    co.owned_by(thesis, victim)
    up = "x/" + "../" * 12 + str(thesis).lstrip("/")  # through a folder of theirs named after the key, up to /
    mine = served(co.get(attacker, images["x"], cache, 1, **env_http()))
    record = mine.with_suffix(".json")
    record.write_text(record.read_text().replace('"target": "sqsh"', f'"target": "{up}"'))
    co.plant(mine.with_name(f"{mine.name.split('.')[0]}.x") / "keep", attacker)
    legacy = cache / "artifacts" / f"{'e' * 64}.json"  # the same in the shared layout of old
    co.plant(legacy, attacker, json.dumps({"key": "e" * 64, "target": up, "size": 1}).encode())
    co.plant(legacy.with_name(f"{'e' * 64}.x") / "keep", attacker)
    co.get(victim, images["y"], cache, 2, **env_http())
    pruned = co.ckit_as(victim, "cache", "prune", "--cache", str(cache), "--max-size", "1")
    assert pruned.returncode == 0, pruned.stderr
    again = co.get(victim, images["z"], cache, 3, config="max_size: 1\n", **env_http())
    assert again.returncode == 0, again.stderr
    as_root = subprocess.run([co.CKIT, "cache", "prune", "--cache", str(cache), "--max-size", "1"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert as_root.returncode == 0, as_root.stderr
    assert thesis.read_text() == "four years of work\n"


def test_no_user_is_served_an_image_another_user_planted(victim: User, attacker: User, base: Path,
                                                        images: dict[str, co.Image]) -> None:
    """(a) the attacker replaces their own copy of an image the victim uses, and its record; (b) pre-seeds a record
    and a file for an image nobody converted, in their tree and in the shared layout of old; (c) plants reuse
    records relabelling their layer as the shared base layer. The victim is served genuine images, and a fresh
    conversion of the victim's is byte for byte what a private store makes."""
    cache = co.cache_folder(base, "poison")
    poison = served(co.get(attacker, images["poison"], cache, 1, **env_http()))
    victims = served(co.get(victim, images["x"], cache, 2, **env_http()))
    theirs = served(co.get(attacker, images["x"], cache, 3, **env_http()))
    theirs.write_bytes(poison.read_bytes())
    co.record_stat(theirs.with_suffix(".json"), theirs, attacker)
    assert served(co.get(victim, images["x"], cache, 4, **env_http())) == victims
    assert co.hello(victims) == b"genuine x\n"
    name, digest = ref_name(images["y"]), manifest_digest(images["y"])
    forged = json.dumps({"key": poison.name.split(".")[0], "digest": digest, "target": "sqsh",
                         "compression": SQSH, "ref": images["y"].ref}).encode()
    for folder in (tree(cache, attacker), cache):  # (b) their tree, and the old shared layout
        co.plant(folder / "refs" / "images" / f"{name}.json", attacker, forged)
    co.plant(cache / "artifacts" / poison.name, attacker, poison.read_bytes())
    co.plant(cache / "artifacts" / poison.with_suffix(".json").name, attacker,
             poison.with_suffix(".json").read_bytes())
    fresh = co.get(victim, images["y"], cache, 5, **env_http())
    assert "converting" in fresh.stderr and co.hello(served(fresh)) == b"genuine y\n"
    for name in os.listdir(tree(cache, attacker) / "reuse"):  # (c) every reuse file they have, under every name
        data = (tree(cache, attacker) / "reuse" / name).read_bytes()
        co.plant(cache / "reuse" / name, attacker, data)
    converted = served(co.get(victim, images["z"], cache, 6, **env_http()))
    private = co.cache_folder(base, "private-z", 0o755)
    os.chown(private, victim.uid, victim.gid)
    reference = served(co.get(victim, images["z"], private, 7, **env_http()))
    assert co.sha256(converted) == co.sha256(reference) and co.hello(converted) == b"genuine z\n"


def test_another_users_files_neither_hang_nor_exhaust_a_reader(victim: User, attacker: User, base: Path,
                                                              images: dict[str, co.Image]) -> None:
    """A lease of the attacker's kept alive by touching it, a FIFO and /dev/zero where records are read, and a
    folder taken in /tmp where the victim's node-local markers go: the victim's get, ``cache ls`` and ``cache
    prune`` finish, in bounded memory."""
    cache = co.cache_folder(base, "hang")
    served(co.get(attacker, images["v"], cache, 1, **env_http()))
    theirs = tree(cache, attacker)
    lease = co.plant(theirs / "locks" / f"{ref_name(images['w'])}.lease", attacker, b'{"token": "../../x"}')
    os.mkfifo(theirs / "artifacts" / f"{'f' * 64}.json")
    co.owned_by(theirs / "artifacts" / f"{'f' * 64}.json", attacker)
    co.plant(theirs / "artifacts" / f"{'f' * 64}.sqsh", attacker, b"hsqs")
    co.plant(theirs / "refs" / "images" / f"{ref_name(images['w'])}.json", attacker, link="/dev/zero")
    co.plant(cache / "locks" / f"{ref_name(images['w'])}.lease", attacker, link="/dev/zero")
    markers = Path("/tmp") / f"ckit-{victim.uid}"  # noqa: S108 (the folder the victim's markers go to)
    stop = threading.Event()

    def keep_alive() -> None:  # the attacker's lease looks alive for as long as the test runs
        while not stop.wait(0.1):
            os.utime(lease)

    keeper = threading.Thread(target=keep_alive)
    keeper.start()
    try:
        markers.mkdir(mode=0o777, exist_ok=True)
        co.owned_by(markers, attacker)
        os.mkfifo(markers / "importer-0.busy")
        got = co.get(victim, images["w"], cache, 2, timeout=90, **env_http())
        assert got.returncode == 0 and "converting" in got.stderr, got.stderr
        assert co.hello(served(got)) == b"genuine w\n"
        for args in (["ls"], ["prune", "--max-size", "100G"]):
            ran = spawn(victim.argv(co.CKIT, "cache", *args, "--cache", str(cache)), env=victim.env(), timeout=60)
            assert ran.returncode == 0 and not ran.timed_out, ran.stderr
            assert ran.max_rss < MEMORY_CEILING
    finally:
        stop.set()
        keeper.join()
        subprocess.run(["rm", "-rf", str(markers)], check=False)  # noqa: S603,S607


def test_outputs_are_never_written_through_another_users_link(victim: User, attacker: User, base: Path,
                                                             images: dict[str, co.Image]) -> None:
    drop = co.cache_folder(base, "drop")
    thesis = victim.home / "thesis.tex"
    thesis.write_text("four years of work\n")
    co.owned_by(thesis, victim)
    co.plant(drop / "out.sqsh", attacker, link=str(thesis))
    co.plant(drop / "mine.sqsh", attacker, link=str(thesis))
    convert = co.ckit_as(victim, "convert", f"docker://{images['x'].ref}", "--to", "sqsh", "-o",
                         str(drop / "out.sqsh"), **env_http())
    assert convert.returncode == 2 and "does not write through it" in convert.stderr, convert.stderr
    own = served(co.get(victim, images["x"], co.cache_folder(base, "drop-src"), 1, **env_http()))
    copy = victim.home / "mine.sqsh"
    copy.write_bytes(own.read_bytes())
    co.owned_by(copy, victim)
    stage = co.ckit_as(victim, "stage", str(copy), "--dest", str(drop))
    assert stage.returncode == 0, stage.stderr
    assert Path(stage.stdout.strip()) == tree(drop, victim) / "files" / "mine.sqsh"
    assert thesis.read_text() == "four years of work\n"


def test_private_images_holds_and_trees_stay_their_users(victim: User, attacker: User, base: Path,
                                                        registry_auth, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = co.cache_folder(base, "private")
    creds = {"CKIT_REGISTRY_USER": registry_auth.username, "CKIT_REGISTRY_PASSWORD": registry_auth.password}
    image = co.push(registry_auth.host, tmp_path, "secret", {"etc/hello": b"secret\n"}, env=creds)
    netrc = victim.home / ".config" / "enroot" / ".credentials"
    netrc.parent.mkdir(parents=True, exist_ok=True)
    netrc.write_text(f"machine 127.0.0.1 login {registry_auth.username} password {registry_auth.password}\n")
    for path in (netrc.parent.parent, netrc.parent, netrc):
        co.owned_by(path, victim)
    netrc.chmod(0o600)
    path = served(co.get(victim, image, cache, 11, **env_http()))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and co.hello(path) == b"secret\n"
    assert as_user(attacker, ["cat", str(path)]).returncode != 0
    refused = co.get(attacker, image, cache, 12, **env_http())
    assert refused.returncode != 0 and refused.stdout == ""
    hold = next((tree(cache, victim) / "holds").glob("*/11.0@*"))
    assert as_user(attacker, ["rm", "-f", str(hold)]).returncode != 0 and hold.exists()
    assert as_user(attacker, ["touch", str(tree(cache, victim) / "reuse" / "x")]).returncode != 0
    pruned = co.ckit_as(attacker, "cache", "prune", "--cache", str(cache), "--max-size", "0")
    assert pruned.returncode == 0 and path.is_file(), pruned.stderr


MULTI_NODE = "hostname node1 && exec {argv}"


def test_a_live_converter_in_another_pid_namespace_is_waited_for(victim: User, base: Path, registry,
                                                                 tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two nodes of the same name in their own PID namespaces: each get sees the other's lease with a pid that
    means another process (or none) in its own namespace. The second waits; one conversion, both served."""
    cache = co.cache_folder(base, "nodes")
    big = co.push(registry.host, tmp_path, "big", {f"data/{n}": os.urandom(6 << 20) for n in range(4)}
                  | {"etc/hello": b"genuine big\n"})
    procs = []
    for job in (1, 2):
        env = co.pyxis_env(victim, cache, job, **env_http())
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--uts", "sh", "-c",
                MULTI_NODE.format(argv=" ".join(victim.argv(IMPORTER, "get", big.uri)))]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # noqa: S603
    outs = [proc.communicate(timeout=180) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in outs]
    assert outs[0][0] == outs[1][0] and sum("converting" in err for _, err in outs) == 1
    assert co.hello(outs[0][0].strip()) == b"genuine big\n"


def test_a_cache_its_reader_cannot_write_serves_what_it_holds(victim: User, base: Path,
                                                             images: dict[str, co.Image]) -> None:
    """A cache filled by its owner (root here, staging for everyone) that users may only read."""
    cache = co.cache_folder(base, "readonly", 0o755)
    staged = subprocess.run([co.CKIT, "stage", images["x"].ref, "--to", "sqsh", "--dest", str(cache), "--json"],
                            capture_output=True, text=True, timeout=120, check=False,
                            env={**os.environ, **env_http()})
    assert staged.returncode == 0, staged.stderr
    got = co.get(victim, images["x"], cache, 1, **env_http())
    assert got.returncode == 0 and "converting" not in got.stderr, got.stderr
    assert served(got).parent == cache / "u0" / "artifacts"
    world = co.cache_folder(base, "world-open", 0o777)  # writable by all, not sticky: refused with the fix
    open_get = co.get(victim, images["x"], world, 2, **env_http())
    assert open_get.returncode == 2 and "chmod +t" in open_get.stderr, open_get.stderr
