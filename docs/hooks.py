"""mkdocs hooks: the home page is the README (the repository's front page, its links made the site's), the reference
pages are generated from the code at every build (``reference_pages.py``), and so are the pictures
(``pictures.py``: diagrams from ``diagrams/*.dot``, the site chart from the site profiles, the benchmark plots from
``benchmarks.yaml``, whose tables ``benchmark_pages.py`` writes into the benchmarks page)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).parent))

import benchmark_pages  # noqa: E402 - found through the line above
import pictures  # noqa: E402
import reference_pages  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the repository's own pages, shown on the site as they are (their links into docs/ made the site's)
ROOT_PAGES = {"contributing.md": ROOT / "CONTRIBUTING.md", "changelog.md": ROOT / "CHANGELOG.md"}
# the README's text picture of the pipeline (for a terminal or a plain-text reader); the site draws it instead
_PIPELINE_TEXT = re.compile(r"<!-- pipeline -->\n```\n.*?\n```\n", re.DOTALL)
PIPELINE_PICTURE = "![ckit's pipeline: recipes and sites to built images, files, registries and jobs](img/pipeline.svg)\n"


def site_links(text: str) -> str:
    """A repository page's links as the site's: into ``docs/`` relative to the site's root, to the root's pages to
    their pages on the site."""
    text = text.replace("](docs/", "](")
    for path, source in ROOT_PAGES.items():
        text = text.replace(f"]({source.name})", f"]({path})")
    return text


def home() -> str:
    """The README with its links made the site's and the pipeline as a picture."""
    text = site_links(README.read_text())
    shown, count = _PIPELINE_TEXT.subn(PIPELINE_PICTURE, text)
    if count != 1:
        raise ValueError("README.md: the pipeline's text picture (after <!-- pipeline -->) is missing")
    return shown


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "index.md", content=home()))
    for path, source in ROOT_PAGES.items():
        files.append(File.generated(config, path, content=site_links(source.read_text())))
    for path, make in reference_pages.PAGES.items():
        files.append(File.generated(config, path, content=make()))
    for path, draw in pictures.pictures().items():
        files.append(File.generated(config, path, content=draw()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri == "benchmarks.md":
        return benchmark_pages.page(markdown)
    return markdown
