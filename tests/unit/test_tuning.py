"""The speed mechanisms change no byte: a small multi-layer image converted plainly and tuned gives the same
.sqsh and .sif; ``CKIT_PLAIN`` chooses which mechanisms run."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.errors import ConfigError
from buildkit.image import reading
from buildkit.image.convert import convert, convert_many
from buildkit.image.speed.tuning import TUNED, Tuning
from buildkit.storage.store import Store
from tests.unit.fake_image import StreamedSource, oci_layout, sample_layers


class Counted:
    """Counts the precompressors and header scans a conversion starts (what the tuning switches)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.precompressors = self.scans = 0
        real_pre, real_scan = reading.Precompressor, reading.HeaderScan

        def pre(*args: object, **kwargs: object) -> object:
            self.precompressors += 1
            return real_pre(*args, **kwargs)  # type: ignore[arg-type]

        def scan(*args: object, **kwargs: object) -> object:
            self.scans += 1
            return real_scan(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(reading, "Precompressor", pre)
        monkeypatch.setattr(reading, "HeaderScan", scan)


@pytest.mark.parametrize("target", ["sqsh", "sif"])
def test_plain_and_tuned_give_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    counted = Counted(monkeypatch)
    layers = sample_layers()
    tuned = convert(StreamedSource(layers), target, store=Store(tmp_path / "tuned"), tuning=TUNED)
    assert counted.precompressors == 3 and counted.scans == 3  # every streamed layer: the mechanisms ran
    plain = convert(StreamedSource(layers), target, store=Store(tmp_path / "plain"), tuning=Tuning.plain())
    assert counted.precompressors == 3 and counted.scans == 3  # and plainly, none of them
    assert not tuned.cache_hit and not plain.cache_hit and tuned.key == plain.key
    assert tuned.path.read_bytes() == plain.path.read_bytes()
    assert plain.compressed_bytes > 0 and plain.reused_bytes == 0


def test_each_mechanism_off_gives_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    layers = sample_layers()
    made = {name: convert(StreamedSource(layers), "sqsh", store=Store(tmp_path / name),
                          tuning=TUNED.without(name)).path.read_bytes() for name in Tuning.names()}
    assert len(set(made.values())) == 1


def test_a_local_layout_converts_the_same_as_the_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local compressed layers take the plain path (decompressed, then indexed); the output is the stream's."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    layers = sample_layers()
    layout = oci_layout(tmp_path / "layout", layers)
    local = convert_many(f"oci:{layout}:1", [("sqsh", None)], store=Store(tmp_path / "local"), tuning=TUNED)[0]
    streamed = convert(StreamedSource(layers), "sqsh", store=Store(tmp_path / "streamed"), tuning=TUNED)
    assert local.path.read_bytes() == streamed.path.read_bytes()


def test_ckit_plain_names_the_mechanisms_it_switches_off() -> None:
    assert Tuning.from_env({}) == TUNED == Tuning.from_env({"CKIT_PLAIN": "0"})
    assert Tuning.from_env({"CKIT_PLAIN": "1"}) == Tuning.plain()
    assert not any(getattr(Tuning.plain(), name) for name in Tuning.names())
    chosen = Tuning.from_env({"CKIT_PLAIN": "precompress, write_behind"})
    assert not chosen.precompress and not chosen.write_behind and chosen.share_cpus and chosen.trim_memory
    with pytest.raises(ConfigError, match="no speed mechanism is called turbo") as err:
        Tuning.from_env({"CKIT_PLAIN": "turbo"})
    assert "precompress" in (err.value.hint or "")


def test_the_environment_is_read_once_when_no_tuning_is_given(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    counted = Counted(monkeypatch)
    monkeypatch.setenv("CKIT_PLAIN", "1")
    convert(StreamedSource(sample_layers()), "sqsh", store=Store(tmp_path / "s"))
    assert counted.precompressors == counted.scans == 0
