"""Who writes a shared cache folder, and whose files a reader serves.

A cache folder (the Pyxis importer's, a site's staging folder) is shared by users who do not trust each other, so
no user writes where another one reads from::

    <cache>/                 made by the admin: when others may write it, it must be sticky (1777, or 3770 + a group)
      ckit-cache.yaml        optional policy, root's: ``trust: [USER, UID or @GROUP, …]``
      u<UID>/                one user's tree (a store: :class:`.store.Store`), made by that user, 0755: nobody else
                             can create, replace or delete anything in it

The sticky bit keeps users from renaming or removing each other's trees, and a tree counts as ``UID``'s only when
it is a real folder owned by ``UID`` that no group or other user may write. A reader serves only from **trusted
trees**: its own, root's, and the users and groups root's policy names (the folder's owner only when it is root or
named there: whoever can create a folder in ``/scratch`` owns it). Anything another user converted is invisible to
it unless the policy trusts that user: it converts its own copy instead. So no user can make another run an image
they planted.

No user can keep another from working either: a cache folder anyone but root (or this user) made in a folder
others may write is refused with a message for the admin (:func:`.safefs.place_flaw`: anyone could have made it,
or a link with its name, before its first use); a tree another user made under this user's name is reported and
passed over (the user is still served the trusted trees and converts into its personal store).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from . import safefs

POLICY = "ckit-cache.yaml"
TREE = re.compile(r"u([0-9]{1,10})")  # ASCII digits only


def tree_name(uid: int) -> str:
    return f"u{uid}"


@dataclass(frozen=True)
class Policy:
    """The users (by uid) and groups (by gid) whose trees every reader of the cache trusts besides its own and
    root's; ``note`` says why a policy file was ignored, if it was."""

    uids: frozenset[int] = frozenset()
    gids: frozenset[int] = frozenset()
    note: str = ""

    def trusts_group_member(self, uid: int) -> bool:
        import grp
        import pwd

        try:
            user = pwd.getpwuid(uid)
        except KeyError:
            return False
        for gid in self.gids:
            try:
                if user.pw_gid == gid or user.pw_name in grp.getgrgid(gid).gr_mem:
                    return True
            except KeyError:
                continue
        return False


def _resolve(item: object, where: str) -> tuple[str, int]:
    """("uid"|"gid", number) for a policy entry: a user name, a uid or ``@group``."""
    import grp
    import pwd

    text = str(item).strip()
    if isinstance(item, int) and not isinstance(item, bool):
        return "uid", item
    try:
        if text.startswith("@"):
            return "gid", grp.getgrnam(text[1:]).gr_gid
        return "uid", pwd.getpwnam(text).pw_uid
    except KeyError:
        raise ConfigError(f"{where}: trust: no such {'group' if text.startswith('@') else 'user'} {text!r}",
                          hint="name users, uids or @groups this machine knows") from None


def parse_policy(data: bytes, where: str) -> Policy:
    import yaml

    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"{where}: not a YAML document: {err}") from None
    if doc is None:
        return Policy()
    if not isinstance(doc, dict) or set(doc) - {"trust"}:
        raise ConfigError(f"{where}: expected a mapping with the one key trust",
                          hint="write e.g. trust: [alice, '@ckit-writers']")
    items = doc.get("trust") or []
    if not isinstance(items, list):
        raise ConfigError(f"{where}: trust: expected a list of users, uids and @groups")
    uids: set[int] = set()
    gids: set[int] = set()
    for item in items:
        kind, number = _resolve(item, where)
        (uids if kind == "uid" else gids).add(number)
    return Policy(frozenset(uids), frozenset(gids))


class CacheRoot:
    """A shared cache folder: its checks, its policy and its users' trees (see the module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._st: os.stat_result | None = None
        self._policy: Policy | None = None
        self.taken = ""  # why this user's tree is not its own (made by someone else), once :meth:`own_tree` saw it

    def status(self) -> os.stat_result | None:
        """The folder's status once it passed :meth:`check_mode` (None while there is no folder)."""
        if self._st is None:
            why = safefs.place_flaw(self.path)
            if why is not None:
                raise ConfigError(f"cache folder {self.path}: {why}; ckit neither serves from it nor writes there",
                                  hint="an admin: make the cache folder as root (mkdir -m 1777, see "
                                       "docs/cluster-cache.md), or point the configuration at a folder root made")
            try:
                st = os.stat(self.path)  # the admin's path may be a link (to a Lustre project folder, say)
            except FileNotFoundError:
                return None
            except OSError as err:
                raise ConfigError(f"cache folder {self.path}: {err.strerror}") from None
            check_mode(self.path, st)
            self._st = st
        return self._st

    @property
    def owner(self) -> int | None:
        st = self.status()
        return st.st_uid if st is not None else None

    def policy(self) -> Policy:
        """The folder's ``ckit-cache.yaml`` when root wrote it; an empty policy otherwise."""
        if self._policy is None:
            path = self.path / POLICY
            fd = safefs.open_checked(path)
            if fd is None:
                self._policy = Policy()
            else:
                os.close(fd)
                self._policy = self._read_policy(path)
        return self._policy

    def _read_policy(self, path: Path) -> Policy:
        st = os.lstat(path)
        if st.st_uid != 0:
            return Policy(note=f"{path} was ignored: it belongs to uid {st.st_uid}, not to root")
        data = safefs.read_small(path, st.st_uid)
        if data is None:
            return Policy(note=f"{path} was ignored: others may write it, or it is too large")
        return parse_policy(data, str(path))

    def trusted_uids(self) -> list[int]:
        """This user, root and the users root's policy names (the folder's owner among them, or not), in that
        order."""
        found = [os.geteuid(), 0]
        if self.owner is not None and self.owner in self.policy().uids:
            found.append(self.owner)
        found += sorted(self.policy().uids)
        return list(dict.fromkeys(found))

    def trees(self) -> list[tuple[int, Path]]:
        """Every folder here that is a sound tree of the user it is named after (uid, path), whoever that is."""
        found = []
        try:
            with os.scandir(self.path) as listing:
                names = [item.name for item in listing]
        except OSError:
            return []
        for name in sorted(names):
            match = TREE.fullmatch(name)
            if match and safefs.dir_flaw(self.path / name, int(match.group(1))) is None:
                found.append((int(match.group(1)), self.path / name))
        return found

    def trusted_trees(self) -> list[tuple[int, Path]]:
        """The trees a reader serves from: its own first, then root's and the policy's."""
        if self.status() is None:
            return []
        uids = self.trusted_uids()
        policy = self.policy()
        if policy.gids:
            uids += [uid for uid, _ in self.trees() if uid not in uids and policy.trusts_group_member(uid)]
        return [(uid, self.path / tree_name(uid)) for uid in uids
                if safefs.dir_flaw(self.path / tree_name(uid), uid) is None]

    def own_tree(self) -> Path | None:
        """This user's tree, made when missing; None when this user cannot write the folder (then it only reads)
        or another user took the name first (:attr:`taken` says how: the user converts elsewhere)."""
        tree = self.path / tree_name(os.geteuid())
        try:
            if self.status() is None:
                os.makedirs(self.path, exist_ok=True)  # a new folder of this user's (ckit stage --dest NEW)
            safefs.ensure_dir(tree, 0o755)
        except OSError as err:
            if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return None  # a reader of this cache, not a writer
            raise ConfigError(f"cache folder {self.path}: {err.strerror or err}") from None
        except safefs.Unsafe as err:
            self.taken = str(err)
            return None
        return tree

    def squatted(self) -> list[str]:
        """The entries named like a user's tree that are not that user's sound tree (made by someone else, a link,
        open to others): what ``ckit cache ls`` reports, for the admin to remove."""
        found = []
        try:
            with os.scandir(self.path) as listing:
                names = sorted(item.name for item in listing)
        except OSError:
            return []
        for name in names:
            match = TREE.fullmatch(name)
            why = safefs.dir_flaw(self.path / name, int(match.group(1))) if match else None
            if why is not None:
                found.append(f"{self.path / name}: {why}")
        return found


def check_mode(path: Path, st: os.stat_result) -> None:
    """Refuse a cache folder that others may write without the sticky bit (they could replace or delete another
    user's whole tree), or that is not a folder."""
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"cache folder {path} is not a folder")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        who = "every user" if st.st_mode & 0o002 else "its group"
        raise ConfigError(f"cache folder {path} may be written by {who} but has no sticky bit: anyone of them could "
                          "replace or delete another user's images",
                          hint=f"as its owner or root: chmod +t {path}  (see docs/cluster-cache.md)")
