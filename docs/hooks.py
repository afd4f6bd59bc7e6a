"""mkdocs hooks: the home page is the README (the repository's front page, its links made the site's) and the
reference pages are generated from the code at every build (``reference_pages.py``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).parent))

import reference_pages  # noqa: E402 - found through the line above

README = Path(__file__).resolve().parents[1] / "README.md"


def home() -> str:
    """The README with its links into ``docs/`` made relative to the site's root."""
    return README.read_text().replace("](docs/", "](")


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "index.md", content=home()))
    for path, make in reference_pages.PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files
