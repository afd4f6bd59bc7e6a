"""``ckit convert SOURCE --to sif|sqsh``: any image to a SIF or an Enroot squashfs, rootless, via the store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..api._cli import SOURCE_FORMS
from .app import SETTINGS, JsonOpt, app, emit_json, info, progress, say


@app.command("convert")
def convert(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="Image: " + ", ".join(SOURCE_FORMS) + ".")],
    to: Annotated[str, typer.Option("--to", metavar="sif,sqsh", help="Target format, or both (sif,sqsh).")],
    output: Annotated[str | None, typer.Option("-o", "--output", metavar="FILE|DIR/", help=(
        "Where the artifact goes (atomic; a FILE there is replaced). Default: the current folder, named after the "
        "image as apptainer pull names it (ubuntu_22.04.sif); a DIR (one that exists, or DIR/ with its slash, "
        "made when missing; always with two formats): that name in DIR. A file of that name is never replaced: "
        "name it with -o FILE to replace it."))] = None,
    compress: Annotated[str | None, typer.Option("--compress", metavar="ALGO[:LEVEL]",
                                                 help="Squashfs compression: zstd, gzip, lz4 or xz, with an "
                                                      "optional level; zstd:-7..-1 are zstd's fast modes. Default: "
                                                      "gzip:1 for sif, which every Singularity and Apptainer runs "
                                                      "(SingularityCE refuses zstd, Apptainer reads it from 1.4), "
                                                      "zstd:1 for a --site that reads it; zstd:-3 for sqsh, lz4:1 for "
                                                      "a --site whose Pyxis starts from the file with squashfuse, "
                                                      "gzip:1 if the --site cannot mount zstd. Without a level, the "
                                                      "target's level for that algorithm; lzo is not written.")] = None,
    site: Annotated[str | None, typer.Option("--site", metavar="SITE",
                                             help="Pick a compression the site's kernel mounts and its "
                                                  "Singularity/Apptainer version reads.")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="Plain http / no TLS verification.")] = False,
    ca_file: Annotated[Path | None, typer.Option("--ca-file", metavar="PATH",
                                                 help="CA bundle for the registry.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Convert an image to .sif or Enroot .sqsh without root, apptainer or enroot."""
    from .. import api

    with progress() as reporter:
        results = api.convert_many(source, [t.strip() for t in to.split(",")], output=output or Path.cwd(),
                                   compress=compress, site=site, insecure=insecure, ca_file=ca_file,
                                   sites=SETTINGS.sites_dirs, progress=reporter, max_size=SETTINGS.store_max_size)
    if as_json:
        emit_json({"source": source, **results[0].as_json()} if len(results) == 1 else
                  {"source": source, "artifacts": [r.as_json() for r in results]})
        return
    for result in results:
        how = "cache hit" if result.cache_hit else f"{result.seconds:.1f} s"
        info(f"{result.target} ({result.compression}, {result.size / 1e6:.1f} MB, {how}) from {result.source_digest}")
        say(str(result.path))
