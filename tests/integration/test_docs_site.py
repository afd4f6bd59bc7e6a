"""The docs site as a reader sees it: built with ``mkdocs build --strict``, served on loopback and opened page by page
in Debian's headless Chromium (through chromedriver). Every page renders with its title, every picture loads
(``naturalWidth > 0``: the SVGs drawn at the build, not a broken icon), every internal link names a page or file the
site has and, with a ``#fragment``, an element of that page. The browser resolves nothing but 127.0.0.1, so the
check cannot reach or depend on anything outside this machine."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
# Chromium as root in a container: no sandbox, no GPU, and none of its own traffic (updates, sync, QUIC probes)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,900",
         "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]
# what each page reads from the browser: its title, its pictures, its links and the ids links may point at
PAGE_FACTS = """return {
  h1: (document.querySelector('article h1') || {}).textContent || '',
  text: document.querySelector('article') ? document.querySelector('article').innerText : '',
  images: Array.from(document.querySelectorAll('article img')).map(i => ({src: i.currentSrc || i.src,
      complete: i.complete, width: i.naturalWidth})),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
};"""


@dataclass(frozen=True)
class Site:
    folder: Path
    url: str

    def pages(self) -> list[str]:
        """Every page of the site by its URL (``index.html`` of each folder; the 404 page is no page)."""
        found = sorted(p.relative_to(self.folder).parent.as_posix() for p in self.folder.rglob("index.html"))
        return [self.url + ("" if p == "." else p + "/") for p in found]

    def target(self, url: str) -> Path | None:
        """The file an internal URL serves (None: it serves nothing)."""
        path = self.folder / unquote(urlsplit(url).path).lstrip("/")
        path = path / "index.html" if path.is_dir() else path
        return path if path.is_file() else None


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(folder)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(folder, f"http://127.0.0.1:{server.server_port}/")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    for program in (CHROMIUM, CHROMEDRIVER):
        assert program.exists(), f"{program} missing: bash tests/infra/install.sh installs chromium, chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def facts(site: Site, browser: webdriver.Chrome) -> dict[str, dict]:
    """What the browser shows of every page, each page loaded once (by its URL)."""
    seen = {}
    for url in site.pages():
        browser.get(url)
        assert browser.execute_script("return document.readyState") == "complete", url
        seen[url] = browser.execute_script(PAGE_FACTS)
    return seen


def test_every_page_renders_with_its_title(site: Site, facts: dict[str, dict]) -> None:
    assert len(facts) >= 20, sorted(facts)  # the hand-written pages, the generated ones, contributing, changelog
    empty = [url for url, page in facts.items() if not page["h1"].strip() or len(page["text"]) < 200]
    assert not empty, empty


def test_every_picture_loads(facts: dict[str, dict]) -> None:
    broken = [(url, image["src"]) for url, page in facts.items() for image in page["images"]
              if not image["complete"] or image["width"] == 0]
    assert not broken, broken
    shown = {Path(urlsplit(image["src"]).path).name for page in facts.values() for image in page["images"]}
    expected = {"pipeline.svg", "cluster-cache.svg", "sites.svg", "bench-conversion.svg", "bench-ttfs.svg",
                "bench-stream.svg", "bench-incremental.svg", "bench-registries.svg", "bench-importer.svg",
                "bench-builds.svg"}
    assert expected <= shown, expected - shown


def test_the_pictures_stand_on_their_pages(site: Site, facts: dict[str, dict]) -> None:
    def pictures(page: str) -> set[str]:
        return {Path(urlsplit(i["src"]).path).name for i in facts[site.url + page]["images"]}
    assert "pipeline.svg" in pictures("")
    assert "sites.svg" in pictures("jobs/")
    assert "cluster-cache.svg" in pictures("cluster-cache/")
    assert len({p for p in pictures("benchmarks/") if p.startswith("bench-")}) == 7


def test_no_internal_link_is_broken(site: Site, facts: dict[str, dict]) -> None:
    broken = []
    for url, page in facts.items():
        for link in page["links"]:
            if not link.startswith(site.url):
                continue  # another site: not followed (the browser reaches nothing but this one)
            address, fragment = urldefrag(link)
            if site.target(address) is None:
                broken.append(f"{url}: {link} (no such page or file)")
            elif fragment and address in facts and unquote(fragment) not in facts[address]["ids"]:
                broken.append(f"{url}: {link} (no #{fragment} on that page)")
    assert not broken, "\n".join(broken)


def test_the_command_reference_shows_no_stray_backslash(site: Site, facts: dict[str, dict]) -> None:
    text = facts[site.url + "reference/cli/"]["text"]
    assert "REF|PATH|STACK" in text
    assert "\\|" not in text and "\\<" not in text and "\\&" not in text
