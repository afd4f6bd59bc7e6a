"""The shared cache's trust model (buildkit.storage.trust) and the file operations it rests on (safefs): every user
writes only a tree of their own, readers serve only trees they trust, nothing planted is followed or read without
bound. Run as root, which can hand files to any uid as a co-tenant would have made them."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from buildkit.errors import ConfigError
from buildkit.storage import safefs
from buildkit.storage.cache import CacheDir
from buildkit.storage.trust import CacheRoot, parse_policy

OTHER = 65534  # nobody: the co-tenant


def sticky(path: Path, mode: int = 0o1777) -> Path:
    path.mkdir()
    path.chmod(mode)
    return path


def tree_of(root: Path, uid: int, mode: int = 0o755) -> Path:
    tree = root / f"u{uid}"
    tree.mkdir(mode=mode)
    tree.chmod(mode)
    os.chown(tree, uid, uid)
    return tree


def test_a_folder_others_may_write_must_be_sticky(tmp_path: Path) -> None:
    for mode, who in ((0o777, "every user"), (0o2775, "its group")):
        folder = tmp_path / f"m{mode:o}"
        folder.mkdir()
        folder.chmod(mode)
        with pytest.raises(ConfigError, match=f"may be written by {who} but has no sticky bit") as err:
            CacheRoot(folder).trusted_trees()
        assert f"chmod +t {folder}" in str(err.value.hint)
    assert CacheRoot(sticky(tmp_path / "ok")).trusted_trees() == []


def test_readers_trust_themselves_root_and_roots_policy_only(tmp_path: Path) -> None:
    """The folder's owner is trusted only when root's policy names it (whoever creates a folder owns it), and only
    root's policy file counts."""
    root = sticky(tmp_path / "cache")
    os.chown(root, 4000, 4000)  # a cache account owns the folder
    for uid in (0, 4000, 4001, OTHER):
        tree_of(root, uid)
    cache = CacheRoot(root)
    assert [uid for uid, _ in cache.trusted_trees()] == [0]  # this test runs as root
    (root / "ckit-cache.yaml").write_text("trust: [4000, 4001]\n")
    assert [uid for uid, _ in CacheRoot(root).trusted_trees()] == [0, 4000, 4001]
    for uid in (4000, OTHER):  # the folder owner's policy file, a co-tenant's: no policy
        os.chown(root / "ckit-cache.yaml", uid, uid)
        ignored = CacheRoot(root)
        assert [uid for uid, _ in ignored.trusted_trees()] == [0]
        assert f"belongs to uid {uid}, not to root" in ignored.policy().note


def test_a_tree_counts_only_as_a_real_folder_of_its_user_that_nobody_else_writes(tmp_path: Path) -> None:
    root = sticky(tmp_path / "cache")
    tree_of(root, 4001, 0o777)  # open to others
    (root / "u4002").symlink_to(tmp_path)  # a link
    squatted = tree_of(root, 4003)
    os.chown(squatted, OTHER, OTHER)  # made by someone else under 4003's name
    assert CacheRoot(root).trees() == []


def test_a_tree_taken_by_someone_else_is_passed_over_and_reported(tmp_path: Path) -> None:
    root = sticky(tmp_path / "cache")
    (root / "u0").symlink_to(tmp_path / "elsewhere")
    folder = CacheRoot(root)
    assert folder.own_tree() is None and "it is a symbolic link" in folder.taken
    assert folder.squatted() == [f"{root / 'u0'}: it is a symbolic link"]
    fallback = CacheDir(root, fallback=tmp_path / "mine")
    assert fallback.writer().root == tmp_path / "mine"  # served still, converting into a store of its own
    with pytest.raises(ConfigError, match="it is a symbolic link: ckit neither writes there") as err:
        CacheDir(root).writer()  # no store to fall back to (ckit stage --dest)
    assert "ask root to remove" in str(err.value.hint) and "you did not make it" in str(err.value.hint)
    assert not (tmp_path / "elsewhere").exists()


def test_a_cache_this_user_cannot_write_is_read_and_written_elsewhere() -> None:
    base = Path(tempfile.mkdtemp())  # outside pytest's folder, which only root may enter
    base.chmod(0o755)
    tmp_path = base
    root = sticky(base / "cache", 0o755)
    os.seteuid(OTHER)
    try:
        assert CacheRoot(root).own_tree() is None
        assert CacheDir(root, fallback=tmp_path / "mine").readers()[-1].root == tmp_path / "mine"
        with pytest.raises(ConfigError, match="is not writable for you"):
            CacheDir(root).writer()
    finally:
        os.seteuid(0)
        shutil.rmtree(base)


def test_the_policy_names_users_uids_and_groups(tmp_path: Path) -> None:
    policy = parse_policy(b"trust: [root, 4001, '@root']\n", "p.yaml")
    assert policy.uids == {0, 4001} and policy.gids == {0} and policy.trusts_group_member(0)
    for text, says in ((b"trust: [no-such-user-here]\n", "no such user"), (b"who: []\n", "the one key trust"),
                       (b"trust: 3\n", "expected a list")):
        with pytest.raises(ConfigError, match=says):
            parse_policy(text, "p.yaml")


def test_reads_follow_no_link_and_stop_at_the_limit(tmp_path: Path) -> None:
    (tmp_path / "zero").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * (safefs.RECORD_MAX + 1))
    (tmp_path / "theirs").write_bytes(b"{}")
    os.chown(tmp_path / "theirs", OTHER, OTHER)
    (tmp_path / "open").write_bytes(b"{}")
    (tmp_path / "open").chmod(0o666)
    for name in ("zero", "fifo", "big", "open", "missing"):
        assert safefs.read_small(tmp_path / name, 0) is None, name
    assert safefs.read_small(tmp_path / "theirs", 0) is None and safefs.read_small(tmp_path / "theirs") == b"{}"


def test_writes_create_nothing_through_a_link_and_nothing_others_may_write(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "stamp").symlink_to(victim)
    assert not safefs.touch(tmp_path / "stamp")
    old = os.umask(0)
    try:
        safefs.write_file(tmp_path, "record", b"new\n")
        safefs.ensure_dir(tmp_path / "made")
    finally:
        os.umask(old)
    assert victim.read_text() == "keep\n"
    assert stat.S_IMODE((tmp_path / "record").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o755
    (tmp_path / "link").symlink_to(victim)
    safefs.write_file(tmp_path, "link", b"replaced\n")  # the link itself is replaced, not its target
    assert victim.read_text() == "keep\n" and (tmp_path / "link").read_text() == "replaced\n"
