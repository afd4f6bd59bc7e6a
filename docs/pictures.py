"""The docs site's pictures, drawn at every build from their sources: the diagrams from ``docs/diagrams/*.dot`` by
graphviz, the site chart from the site profiles through ckit's own code (what ``ckit launch`` and ``ckit convert
--site`` would do there), the benchmark plots from ``docs/benchmarks.yaml`` (``benchmark_pages.py``). Nothing here
is drawn by hand or kept as an image in the repository, so a picture cannot fall behind its source."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

DIAGRAMS = Path(__file__).parent / "diagrams"


def svg_of(figure: Any) -> bytes:
    """A matplotlib figure as SVG text that is the same at every build (no date, fixed ids)."""
    import matplotlib.pyplot as plt

    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(figure)
    return out.getvalue().encode()


def plotting() -> Any:
    """matplotlib's pyplot with the site's look, drawn without a display; ids in the SVG do not change between
    builds."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.hashsalt": "ckit-docs", "font.size": 9, "font.family": "DejaVu Sans",
                                "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})
    import matplotlib.pyplot as plt

    return plt


def diagram(name: str) -> Callable[[], bytes]:
    """The SVG graphviz draws from ``docs/diagrams/NAME.dot``."""
    def draw() -> bytes:
        import graphviz

        source = graphviz.Source((DIAGRAMS / f"{name}.dot").read_text(), filename=f"{name}.dot")
        return source.pipe(format="svg")
    return draw


# what each runtime of a site runs, in the chart's words, when it runs no file ckit converts
_NO_ARTIFACT = {"podman": "image reference", "none": "the node's own\nprograms"}
_COLOURS = {"sif": "#dbe7f7", "sqsh": "#dff0e0", "": "#f3efe6"}


def _cell(site: Any, runtime: Any) -> tuple[str, str]:
    """The text and colour of one site × runtime cell: the file format and compression ckit makes for it."""
    from buildkit.image.squashfs.compression import choose_for
    from buildkit.launch.runtimes import REGISTRY as RUNTIMES

    backend = RUNTIMES.get(runtime.kind, "--runtime")
    if site.scheduler == "dlws":  # the platform's job form runs the Docker Image it names on its own nodes
        return "the job form's Docker\nImage (a registry ref)", _COLOURS[""]
    if not backend.artifact:
        return _NO_ARTIFACT.get(runtime.kind, runtime.kind), _COLOURS[""]
    chosen = choose_for(None, site, backend.artifact)
    version = f"{runtime.kind} {runtime.version}" if runtime.version else runtime.kind
    refs = "\nor a registry ref" if backend.refs else ""
    return f".{backend.artifact} {chosen.label}\n({version}){refs}", _COLOURS[backend.artifact]


def sites_chart() -> bytes:
    """Every built-in site (rows) by every runtime ckit knows (columns): what a job there runs, the file format and
    the compression ckit picks for it, the site's default runtime marked."""
    from buildkit.launch.runtimes import REGISTRY as RUNTIMES
    from buildkit.site.load import list_sites

    plt = plotting()
    sites = list_sites()
    kinds = list(RUNTIMES.names())
    figure, axes = plt.subplots(figsize=(1.3 * len(kinds) + 1.1, 0.6 * len(sites) + 0.8))
    for row, site in enumerate(sites):
        for position, runtime in enumerate(site.runtimes):
            text, colour = _cell(site, runtime)
            column = kinds.index(runtime.kind)
            axes.add_patch(plt.Rectangle((column + 0.04, row + 0.06), 0.92, 0.88, facecolor=colour,
                                         edgecolor="#3f6cb4" if position == 0 else "#bbbbbb",
                                         linewidth=1.8 if position == 0 else 0.8))
            axes.text(column + 0.5, row + 0.5, text, ha="center", va="center", fontsize=8)
    axes.set_xlim(0, len(kinds))
    axes.set_ylim(len(sites), 0)
    axes.set_xticks([i + 0.5 for i in range(len(kinds))], kinds)
    axes.xaxis.tick_top()
    axes.set_yticks([i + 0.5 for i in range(len(sites))], [f"{s.name} ({s.scheduler})" for s in sites])
    axes.tick_params(length=0)
    for side in ("left", "bottom"):
        axes.spines[side].set_visible(False)
    axes.set_xlabel("blue frame: the site's default runtime (its profile's first); .sif blue, .sqsh green, "
                    "no file ckit makes beige", fontsize=7.5, color="#555555")
    return svg_of(figure)


def pictures() -> dict[str, Callable[[], bytes]]:
    """Every picture of the site by its path under the site's root."""
    import benchmark_pages

    found: dict[str, Callable[[], bytes]] = {f"img/{p.stem}.svg": diagram(p.stem) for p in
                                             sorted(DIAGRAMS.glob("*.dot"))}
    found["img/sites.svg"] = sites_chart
    found.update(benchmark_pages.plots())
    return found
