"""The user's defaults: ``config.toml``, the environment and the command line, each value with its source.

Precedence is sbatch's: a flag on the command line, then the environment (``SBATCH_ACCOUNT``,
``SBATCH_PARTITION``, ``SBATCH_TIMELIMIT``, ``CKIT_SITE``, …), then the config file, then ckit's default. The
file is ``$CKIT_CONFIG`` when set, else ``config.toml`` in the user's config folder (platformdirs:
``$XDG_CONFIG_HOME/ckit``, by default ``~/.config/ckit``). A file that is not valid TOML, a key ckit does not
know (with a did-you-mean) or a value of the wrong kind is bad input (exit 2) naming the file, the key and its
line. Nothing here is kept between calls: :func:`load` reads what it is given, and the callers pass the
values down as arguments.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..fs.files import read_capped
from ..outside import shown
from . import limits

ENV_FILE = "CKIT_CONFIG"
FOLDERS = ("recipes", "sites")


@dataclass(frozen=True)
class Key:
    """One setting: its dotted name in the file, the environment variables that set it, what it holds."""

    name: str
    env: str
    kind: str  # "text", "folders" or "size"
    meaning: str
    default: str  # what applies when nothing sets it, in words


STORE_MAX_SIZE = 20 << 30  # the personal store's cap unless the user sets one: a few NGC images' worth

KEYS: tuple[Key, ...] = (
    Key("site", "CKIT_SITE", "text", "the site of ckit launch and ckit shell without --site", "none (give --site)"),
    Key("account", "SBATCH_ACCOUNT", "text", "-A/--account of ckit launch and ckit shell", "none"),
    Key("partition", "SBATCH_PARTITION", "text", "-p/--partition of ckit launch and ckit shell",
        "the site's"),
    Key("time", "SBATCH_TIMELIMIT", "text", "-t/--time of ckit launch and ckit shell", "the partition's"),
    Key("recipes", "CKIT_RECIPES_PATH", "folders", "recipe folders over the built-ins (after --recipes)",
        "the built-ins"),
    Key("sites", "CKIT_SITES_PATH", "folders", "site folders over the built-ins (after --sites)", "the built-ins"),
    Key("store.max_size", "CKIT_STORE_MAX_SIZE", "size", "your image store's size beyond which the least "
        "recently used images are evicted (K, M, G, T: powers of 1024)", "20G"),
)
_BY_NAME = {key.name: key for key in KEYS}
_TABLES = {key.name.partition(".")[0] for key in KEYS if "." in key.name}


@dataclass(frozen=True)
class Setting:
    """A value and where it came from: ``flag --recipes``, ``env SBATCH_ACCOUNT``, ``FILE:LINE`` or
    ``default``."""

    key: str
    value: str | tuple[Path, ...] | int | None
    source: str

    def as_json(self) -> dict[str, Any]:
        value = [str(p) for p in self.value] if isinstance(self.value, tuple) else self.value
        return {"value": value, "source": self.source, "meaning": _BY_NAME[self.key].meaning}


@dataclass(frozen=True)
class UserConfig:
    """Every setting, resolved; ``path`` is the file read (``exists`` False when there is none)."""

    path: Path
    exists: bool
    settings: tuple[Setting, ...]

    def get(self, name: str) -> Setting:
        return next(s for s in self.settings if s.key == name)

    def text(self, name: str) -> str | None:
        value = self.get(name).value
        return value if isinstance(value, str) else None

    @property
    def site(self) -> str | None:
        return self.text("site")

    @property
    def account(self) -> str | None:
        return self.text("account")

    @property
    def partition(self) -> str | None:
        return self.text("partition")

    @property
    def time(self) -> str | None:
        return self.text("time")

    @property
    def store_max_size(self) -> int:
        """The store's size cap in bytes (``store.max_size``, ``CKIT_STORE_MAX_SIZE``; default 20 GiB)."""
        value = self.get("store.max_size").value
        return value if isinstance(value, int) else STORE_MAX_SIZE

    def folders(self, kind: str) -> tuple[Path, ...]:
        """The ``recipes``/``sites`` folders ckit adds to the search path itself: the flags', then the file's.
        The environment variable's are added where the folders are searched (it replaces the file's)."""
        setting = self.get(kind)
        if not isinstance(setting.value, tuple) or setting.source.startswith("env "):
            return ()
        return setting.value

    def as_json(self) -> dict[str, Any]:
        return {"file": str(self.path), "exists": self.exists,
                "values": {s.key: s.as_json() for s in self.settings}}


def config_path(env: Mapping[str, str]) -> tuple[Path, bool]:
    """The config file, and whether ``CKIT_CONFIG`` named it (then it must exist)."""
    named = env.get(ENV_FILE, "")
    if named:
        return Path(named).expanduser(), True
    base = env.get("XDG_CONFIG_HOME", "")
    if base and Path(base).is_absolute():  # also where a caller passes its own environment
        return Path(base) / "ckit" / "config.toml", False
    from platformdirs import user_config_dir

    return Path(user_config_dir("ckit", appauthor=False)) / "config.toml", False


def load(env: Mapping[str, str] | None = None, flags: Mapping[str, Sequence[Path]] | None = None) -> UserConfig:
    """Resolve every setting: ``flags`` (the folders given as ``--recipes``/``--sites``), then ``env`` (default:
    the process's environment), then the config file, then the default.

    :raises ConfigError: the file is unreadable, not TOML, or has an unknown key or a bad value (exit 2).
    """
    env = os.environ if env is None else env
    path, named = config_path(env)
    found, lines = _read(path, named)
    settings = []
    for key in KEYS:
        given = list((flags or {}).get(key.name, ()))
        setting = _from_env(key, env) or _from_file(key, found, lines, path) or Setting(key.name, None, "default")
        if given:
            rest = setting.value if isinstance(setting.value, tuple) and not setting.source.startswith("env ") \
                else ()
            setting = Setting(key.name, (*given, *rest), f"flag --{key.name}" + (
                f" + {setting.source}" if rest else ""))
        settings.append(setting)
    return UserConfig(path, found is not None, tuple(settings))


def _read(path: Path, named: bool) -> tuple[dict[str, Any] | None, dict[str, int]]:
    """The file's document and the line of each key; (None, {}) when there is no file (and none was named)."""
    try:
        raw = read_capped(path, limits.size("file_size"), "config file")
    except FileNotFoundError:
        if named:
            raise ConfigError(f"{ENV_FILE}={shown(path)}: no such file",
                              hint=f"create it, or unset {ENV_FILE} to read the default file") from None
        return None, {}
    except OSError as err:
        raise ConfigError(f"{shown(path)}: cannot read the config file: {err.strerror or err}",
                          hint="make it a readable file, or point CKIT_CONFIG to another file") from None
    import tomllib  # only when there is a file: its import costs every start that has none

    try:
        text = raw.decode("utf-8")
        document = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"{shown(path)}: not UTF-8 text", hint="write the config file as UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{shown(path)}: not valid TOML: {err}",
                          hint="fix the line it names (TOML: key = \"value\")") from None
    lines = _key_lines(text)
    _check_keys(document, lines, path)
    return document, lines


_TABLE = re.compile(r"^\s*\[\s*([^\[\]#]+?)\s*\]")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+(?:\s*\.\s*[A-Za-z0-9_-]+)*)\s*=""")


def _key_lines(text: str) -> dict[str, int]:
    """The line of each dotted key (and table) in the TOML ``text``, for messages: the first where it appears."""
    table, found = "", dict[str, int]()
    for number, line in enumerate(text.splitlines(), 1):
        header = _TABLE.match(line)
        if header:
            table = re.sub(r"[\s\"']", "", header[1])
            found.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            name = re.sub(r"[\s\"']", "", key[1])
            found.setdefault(f"{table}.{name}" if table else name, number)
    return found


def _where(path: Path, lines: Mapping[str, int], name: str) -> str:
    line = lines.get(name) or lines.get(name.partition(".")[0])
    return f"{shown(path)}:{line}" if line else shown(path)


def _check_keys(document: Mapping[str, Any], lines: Mapping[str, int], path: Path) -> None:
    """Refuse a key ckit does not know, naming its line, with the closest known key."""
    for name, value in document.items():
        if isinstance(value, dict) and name in _TABLES:
            dotted = [f"{name}.{inner}" for inner in value]
        else:
            dotted = [name]
        for key in dotted:
            if key not in _BY_NAME:
                close = difflib.get_close_matches(key, list(_BY_NAME), n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                raise ConfigError(f"{_where(path, lines, key)}: unknown key {shown(key)!r}",
                                  hint=f"{hint}the keys are {', '.join(_BY_NAME)} (README, Configuration)")


def _from_env(key: Key, env: Mapping[str, str]) -> Setting | None:
    text = env.get(key.env, "")
    if not text:
        return None
    where = f"{key.env}={text!r}"
    if key.kind == "folders":
        return Setting(key.name, tuple(Path(p).expanduser() for p in text.split(os.pathsep) if p),
                       f"env {key.env}")
    value: str | int = limits.parse_size(text, key.env) if key.kind == "size" else _text(text, where)
    return Setting(key.name, value, f"env {key.env}")


def _from_file(key: Key, document: Mapping[str, Any] | None, lines: Mapping[str, int],
               path: Path) -> Setting | None:
    table, _, inner = key.name.rpartition(".")
    holder = document.get(table) if table and document else document
    if not isinstance(holder, dict) or inner not in holder:
        return None
    value, where = holder[inner], _where(path, lines, key.name)
    if key.kind == "size":
        if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, int) and value < 0):
            raise ConfigError(f"{where}: {key.name} must be a size such as \"20G\"",
                              hint="write e.g. max_size = \"20G\" (K, M, G, T) or a number of bytes")
        return Setting(key.name, limits.parse_size(value, f"{where}: {key.name}"), where)
    if key.kind == "folders":
        return Setting(key.name, _folders(value, where, key.name, path.parent), where)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key.name} must be a string", hint=f"write {key.name} = \"…\"")
    return Setting(key.name, _text(value, f"{where}: {key.name}"), where)


def _text(value: str, where: str) -> str:
    """A name for a job's option: one line of printable text (it becomes a line of the job script)."""
    if not value.strip() or len(value) > 256 or not value.isprintable():
        raise ConfigError(f"{where}: '{shown(value)}' is not a name (empty, too long, or with control "
                          "characters)", hint="give one line of printable text")
    return value


def _folders(value: Any, where: str, name: str, base: Path) -> tuple[Path, ...]:
    """A list of folders (or one), ``~`` expanded, relative ones from the config file's folder; each must exist."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
        raise ConfigError(f"{where}: {name} must be a list of folders", hint=f"write {name} = [\"~/ckit/{name}\"]")
    folders = tuple(base / Path(item).expanduser() for item in items)
    for folder in folders:
        if not folder.is_dir():
            raise ConfigError(f"{where}: {name}: {shown(folder)} is not a folder",
                              hint="create it, or remove it from the list")
    return folders
