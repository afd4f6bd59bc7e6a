"""What the command line needs besides the calls of ``import ckit``: the vocabularies its flags and help texts
name (sources, frameworks, runtimes, the config keys), the text forms its commands print, shell completion, the
Pyxis importer's entry point. ``commands/`` imports the core through here and :mod:`buildkit.api` only (an
import contract holds it), so the API stays the one front door.

Each name is loaded when it is first used, as in :mod:`buildkit.api`: a command module that names one at its
top pays for it at start-up, one that names it inside the command pays when the command runs.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's (see buildkit.api)
if TYPE_CHECKING:
    from ..config import limits
    from ..config.user import KEYS, STORE_MAX_SIZE, UserConfig
    from ..config.user import load as load_settings
    from ..image import SOURCE_FORMS
    from ..image.inspect import render_text as inspect_text
    from ..importer.pyxis import main as pyxis_importer
    from ..launch.frameworks import REGISTRY as FRAMEWORKS
    from ..launch.jobcontrol import JobEvent
    from ..launch.nccl_report import NcclReport
    from ..launch.runtimes import REGISTRY as RUNTIMES
    from ..recipe.catalog import Catalog
    from ..recipe.describe import show_text
    from ..registry.distribution.auth import ENV_PASSWORD, ENV_USER, from_env
    from ..registry.distribution.reference import parse_registry
    from ..registry.transfer.annotations import parse_pairs
    from ..site import load_site
    from ..site.describe import site_data, site_summary, site_text
    from ..site.load import list_sites, load_site_file

# name -> (module, its name there; None: the module itself)
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "pyxis_importer": ("..importer.pyxis", "main"),
    "limits": ("..config.limits", None),
    **{name: ("..config.user", name) for name in ("KEYS", "STORE_MAX_SIZE", "UserConfig")},
    "load_settings": ("..config.user", "load"),
    "SOURCE_FORMS": ("..image", "SOURCE_FORMS"),
    "inspect_text": ("..image.inspect", "render_text"),
    "FRAMEWORKS": ("..launch.frameworks", "REGISTRY"),
    "RUNTIMES": ("..launch.runtimes", "REGISTRY"),
    "JobEvent": ("..launch.jobcontrol", "JobEvent"),
    "NcclReport": ("..launch.nccl_report", "NcclReport"),
    "Catalog": ("..recipe.catalog", "Catalog"),
    "show_text": ("..recipe.describe", "show_text"),
    **{name: ("..registry.distribution.auth", name) for name in ("ENV_PASSWORD", "ENV_USER", "from_env")},
    "parse_registry": ("..registry.distribution.reference", "parse_registry"),
    "parse_pairs": ("..registry.transfer.annotations", "parse_pairs"),
    "load_site": ("..site", "load_site"),
    **{name: ("..site.describe", name) for name in ("site_data", "site_summary", "site_text")},
    **{name: ("..site.load", name) for name in ("list_sites", "load_site_file")},
}

__all__ = ["ENV_PASSWORD", "ENV_USER", "FRAMEWORKS", "KEYS", "RUNTIMES", "SOURCE_FORMS", "STORE_MAX_SIZE",
           "Catalog", "JobEvent", "NcclReport", "UserConfig", "from_env", "inspect_text", "limits", "list_sites",
           "load_settings", "load_site", "load_site_file", "parse_pairs", "parse_registry", "pyxis_importer",
           "show_text", "site_data", "site_summary", "site_text"]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value: object = importlib.import_module(module, __package__)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value
