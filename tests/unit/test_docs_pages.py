"""The docs site's generated text, read as a reader sees it: the command reference shows every help text and
metavar exactly (no stray backslash, no lost pipe or angle bracket), and the benchmark tables and plots come from
the recorded results, every figure with a target plotted."""

from __future__ import annotations

import html
import re
import sys

import markdown
import pytest
import typer

from tests.doctext import ROOT

sys.path.insert(0, str(ROOT / "docs"))
import benchmark_pages  # noqa: E402 - docs/ is on the path above
import reference_pages  # noqa: E402


def shown(text: str) -> str:
    """What a browser shows of markdown text (tags gone, entities read, spaces joined)."""
    rendered = re.sub(r"</?(code|em|strong|a)\b[^>]*>", "", markdown.markdown(text, extensions=["tables"]))
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", rendered)).split())


def _options():
    from buildkit.cli import _app

    root = typer.main.get_command(_app())
    for path, command in [("ckit", root), *reference_pages._commands(root, "ckit")]:
        for param in command.params:
            if param.name != "help" and not getattr(param, "hidden", False):
                yield path, param


def test_the_command_reference_shows_every_help_text_as_written():
    page = shown(reference_pages.cli_markdown())
    for path, param in _options():
        helptext = " ".join((getattr(param, "help", "") or "").replace("`", "").split())
        assert helptext in page, (path, param.name)
        if param.metavar:
            assert param.metavar in page, (path, param.metavar)


def test_no_stray_backslash_in_the_reference_pages():
    for make in reference_pages.PAGES.values():
        text = shown(make())
        assert not re.search(r"\\[|<>\[\]*_&]", text), re.search(r".{30}\\[|<>\[\]*_&].{30}", text)


def test_the_escape_keeps_code_spans_and_shows_markup_as_text():
    cell = reference_pages._escape("a <b> | [c] *d* e_f & `x|y <z>`")
    assert shown(f"| h |\n|---|\n| {cell} |") == "h a <b> | [c] *d* e_f & x|y <z>"


def test_every_benchmark_marker_names_a_recorded_table_and_every_table_is_shown():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    markers = benchmark_pages.MARKER.findall(page)
    assert sorted(markers) == sorted(benchmark_pages.load()), "docs/benchmarks.md and docs/benchmarks.yaml differ"
    expanded = benchmark_pages.page(page)
    assert "<!-- benchmark:" not in expanded
    for name in markers:
        if benchmark_pages.plotted(benchmark_pages.load()[name]):
            assert f"](img/bench-{name}.svg)" in expanded


@pytest.mark.parametrize("name", sorted(benchmark_pages.load()))
def test_every_figure_with_a_target_is_plotted(name):
    """A result whose target is a bound is read as numbers: a slip in its text would drop it from the plot."""
    table = benchmark_pages.load()[name]
    assert set(table["columns"]) >= {"figure", "target", "holds", *table["runs"]}
    for row in table["rows"]:
        assert set(row) - {"label"} == set(table["columns"]), row
        if benchmark_pages.target(row["target"]):
            for run in table["runs"]:
                cell = str(row[run])
                assert benchmark_pages.values(cell) or not cell[:1].isdigit(), (row["figure"], run, cell)


def test_a_result_cell_is_read_as_the_table_says():
    assert benchmark_pages.values("0.57× (5.1 s against 9.0 s)") == [(0.57, 0.57)]
    assert benchmark_pages.values("1.00–1.05× / 1.45–1.58×") == [(1.0, 1.05), (1.45, 1.58)]
    assert benchmark_pages.values("89–95 / 99–108 MB") == [(89, 95), (99, 108)]
    assert benchmark_pages.values("about 1 s") == []
    assert benchmark_pages.target("≥ 8×") == benchmark_pages.Target("≥", 8)
    assert benchmark_pages.target("≥ 8×").against(16) == 0.5
    assert benchmark_pages.target("–") is None
