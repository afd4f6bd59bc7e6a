"""mkdocs hooks: the reference pages are generated from the code at every build (``reference_pages.py``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).parent))

import reference_pages  # noqa: E402 - found through the line above


def on_files(files: Files, config: Any) -> Files:
    for path, make in reference_pages.PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files
