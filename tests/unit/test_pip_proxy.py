"""pip through a TLS-inspecting proxy or from a PyPI mirror: the pip add-on's cert, index_url and trusted_host,
for the install only and nothing when left empty; the docs' worked example resolves as printed (pure)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from buildkit.errors import ConfigError
from buildkit.recipe.catalog import Catalog
from buildkit.recipe.model import Copy, Run
from buildkit.render import dockerfile, singularity
from tests import doctext
from tests.unit.test_first_hour_rules import write_readme_project

EXAMPLE = doctext.between("\n## Offline or behind a proxy", "\n## Converting")


def example_build() -> list[str]:
    """The worked example's ``ckit … build myapp …`` line, as words."""
    line = next(line for line in EXAMPLE.splitlines() if line.startswith("$ ckit --recipes myproject build myapp"))
    return shlex.split(line[2:].split("  #")[0])


def sets(words: list[str]) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words) if word == "--set"]


def test_the_worked_example_gives_pip_the_ca_for_its_install_only(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    project = write_readme_project(tmp_path)
    (tmp_path / "pip-ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.chdir(tmp_path)  # --set paths are relative to the current folder
    words = example_build()
    assert "debian.registry=mirror.example.org/library" in sets(words)
    recipe = Catalog.from_dirs([project]).resolve("myapp", sets=sets(words))
    assert recipe.base_image == "mirror.example.org/library/debian:bookworm"
    copy = next(s for s in recipe.steps if isinstance(s, Copy) and s.dest == "/etc/ckit/pip-cert.pem")
    assert copy.source == (tmp_path / "pip-ca.pem").resolve()
    install = next(s for s in recipe.steps if isinstance(s, Run) and "pip install" in s.commands[-1])
    assert install.env == (("PIP_CERT", "/etc/ckit/pip-cert.pem"),)
    assert recipe.steps.index(copy) < recipe.steps.index(install)
    assert "PIP_CERT" not in dict(recipe.env)  # the running container does not keep it
    text = dockerfile.render(recipe)
    assert 'RUN export PIP_CERT="/etc/ckit/pip-cert.pem" && \\\n    python3 -m pip install' in text
    assert 'export PIP_CERT="/etc/ckit/pip-cert.pem"' in singularity.render(recipe)


def test_an_index_mirror_and_nothing_when_left_empty(tmp_path: Path) -> None:
    project = write_readme_project(tmp_path)
    plain = Catalog.from_dirs([project]).resolve("myapp")
    mirror = Catalog.from_dirs([project]).resolve("myapp", sets=[
        "pip.index_url=http://pypi.mirror.example.org:3141/simple/", "pip.trusted_host=pypi.mirror.example.org:3141"])
    install = next(s for s in mirror.steps if isinstance(s, Run) and "pip install" in s.commands[-1])
    assert install.env == (("PIP_INDEX_URL", "http://pypi.mirror.example.org:3141/simple/"),
                           ("PIP_TRUSTED_HOST", "pypi.mirror.example.org:3141"))
    assert not any(isinstance(s, Copy) and s.dest.startswith("/etc/ckit") for s in mirror.steps)
    # unset: the same install step as before these parameters (only the parameters' label tells them apart)
    text = dockerfile.render(plain)
    assert "PIP_" not in text.split("LABEL ")[0] and "/etc/ckit" not in text


@pytest.mark.parametrize("value", ['https://x.org/"; rm -rf /', "ftp://x.org/simple", "https://x.org/$HOME"])
def test_an_index_url_that_is_not_one_is_bad_input(tmp_path: Path, value: str) -> None:
    project = write_readme_project(tmp_path)
    with pytest.raises(ConfigError) as err:
        Catalog.from_dirs([project]).resolve("myapp", sets=[f"pip.index_url={value}"])
    assert err.value.exit_code == 2 and "index_url" in err.value.message


def test_a_cert_that_is_not_there_is_bad_input(tmp_path: Path) -> None:
    project = write_readme_project(tmp_path)
    with pytest.raises(ConfigError) as err:
        Catalog.from_dirs([project]).resolve("myapp", sets=[f"pip.cert={os.devnull}x"])
    assert "file to copy not found" in err.value.message
