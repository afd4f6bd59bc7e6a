"""``ckit inspect``'s report (buildkit.image.inspect) of a .sif and a .sqsh made here, with the files inside the
squashfs read through a fake in unsquashfs's place (the I/O edge): what the report holds and how its text shows it;
anything but a regular .sif/.sqsh is refused by name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from buildkit.errors import ConfigError
from buildkit.image import inspect as I
from buildkit.image.convert import convert
from buildkit.storage.store import Store
from tests.unit.fake_image import StreamedSource, sample_layers


class FakeSquash:
    """unsquashfs as inspect asks it: a file's bytes, a folder's names, the superblock's lines."""

    files = {"/.singularity.d/labels.json": json.dumps({"org.label-schema.build-arch": "amd64", "z\nkey": "v"})
             .encode(), "/.singularity.d/env/01-base.sh": b"# base\n",
             "/.singularity.d/env/10-docker2singularity.sh": b"export PATH=/usr/bin\n",
             "/.singularity.d/env/90-environment.sh": b"# custom\n", "/.singularity.d/runscript": b"#!/bin/sh\n",
             "/etc/rc": b"exec sh\n"}

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.offset = offset

    def cat(self, inner: str) -> str | None:
        data = self.files.get(inner)
        return data.decode() if data is not None else None

    def listdir(self, inner: str) -> list[str]:
        return sorted(name for name in self.files if name.startswith(inner + "/"))

    def superblock_text(self) -> list[str]:
        return ["Filesystem size 552 Kbytes", "Compression zstd"]


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setattr(I, "SquashReader", FakeSquash)
    store = Store(tmp_path / "store")
    return {target: convert(StreamedSource(sample_layers()), target, store=store).path for target in ("sif", "sqsh")}


def test_a_sif_report_holds_its_header_partition_deffile_labels_and_scripts(made: dict[str, Path]) -> None:
    report = I.inspect(made["sif"])
    assert report["format"] == "sif" and report["partition"]["fstype"] == "Squashfs"
    assert report["partition"]["superblock"]["compression"] == "gzip"  # a .sif for every runtime
    assert report["deffile"].startswith("bootstrap: docker\nfrom: registry.invalid/fake:1")
    assert report["oci_config"]["Cmd"] == ["/bin/sh"]
    assert report["labels"]["org.label-schema.build-arch"] == "amd64"
    text = I.render_text(report)
    assert "Primary partition: object" in text and "Definition file" in text
    assert "z\\nkey" in text  # a label's name shown on one line, whatever it holds
    assert "Environment scripts (3; standard: 01-base.sh)" in text and "# base" not in text  # apptainer's own
    assert "10-docker2singularity.sh" in text and "# custom" in text


def test_a_sqsh_report_holds_its_superblock_and_enroots_files(made: dict[str, Path]) -> None:
    report = I.inspect(made["sqsh"])
    assert report["superblock"]["compression"] == "zstd" and report["superblock"]["created"] == "2023-11-14T22:13:20Z"
    assert report["files"]["/etc/rc"] == "exec sh\n" and report["files"]["/etc/fstab"] is None
    text = I.render_text(report)
    assert "Superblock:" in text and "exec sh" in text


def test_anything_else_is_refused_by_name(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(ConfigError, match="neither a SIF image nor a squashfs"):
        I.inspect(other)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        I.inspect(fifo)
    with pytest.raises(ConfigError, match="cannot read"):
        I.inspect(tmp_path / "missing.sif")
