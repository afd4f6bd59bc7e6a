"""``docker-daemon:REF``: an image in the engine behind ``DOCKER_HOST`` (Docker, or podman's service)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...daemon import Daemon, EngineAPIError, connect, local_image, short_error
from ...errors import ConvertError
from . import engine_storage
from .base import Identity, LayerBlob, Materialized, Reader, Source, short
from .docker_archive import DockerArchive

SAVE_TIMEOUT = 600  # seconds the engine may stay silent during an image save


class DaemonSource(Source):
    """An image in the engine behind ``DOCKER_HOST`` (Docker or podman's service); ``daemon`` and ``inspected``
    when the caller has just asked the engine about it (``ckit build``'s cache check): not asked for again.

    The image ID is the config digest, so identifying needs no save. Materialising reads podman's layers where
    podman keeps them when it can (:mod:`.engine_storage`: no save, and only the layers a conversion needs),
    else spools the engine's save into the work dir (its ``manifest.json``, which lists the layer order, may
    come last, so a seekable copy is needed anyway)."""

    def __init__(self, text: str, ref: str, *, daemon: Daemon | None = None,
                 inspected: Mapping[str, Any] | None = None) -> None:
        self.text, self.ref, self.image_ref, self._daemon = text, ref, ref, daemon
        self._image: dict[str, Any] | None = dict(inspected) if daemon is not None and inspected else None
        self._saved: DockerArchive | None = None
        self._lock = threading.Lock()

    def _get(self) -> dict[str, Any]:
        if self._image is None:
            try:
                self._daemon = self._daemon or connect()
            except (EngineAPIError, OSError) as err:
                raise ConvertError(f"{self.text}: cannot reach the engine: {short_error(err)}",
                                   hint="start Docker or `podman system service`, or set DOCKER_HOST") from err
            self._image = local_image(self.ref, self.text, ConvertError, self._daemon)
        return self._image

    def _connected(self) -> Daemon:
        self._get()
        return self._daemon  # type: ignore[return-value]  # set by _get

    def identify(self) -> Identity:
        # the image ID (= config digest) without a save; the config blob comes only on a cache miss
        image_id = str(self._get()["Id"])
        return Identity(None, image_id if image_id.startswith("sha256:") else "sha256:" + image_id)

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        digest = self.identify().digest  # connects first
        daemon = self._connected()
        stored = engine_storage.locate(daemon.server, daemon.address, self._get(), digest)
        if stored is None:
            archive = self.spool(workdir, progress)
            return Materialized(archive.identify().config or b"", archive.layers())
        saved = functools.partial(self._saved_layer, workdir=workdir, progress=progress)
        return Materialized(stored.config, [
            LayerBlob(layer.tar_split, 0, layer.size, f"layer {n} ({short(layer.diff_id)})", diff_id=layer.diff_id,
                      chunks=functools.partial(engine_storage.assemble, layer), fallback=functools.partial(saved, n - 1))
            for n, layer in enumerate(stored.layers, start=1)])

    def _saved_layer(self, index: int, workdir: Path, progress: Callable[[int], None] | None) -> LayerBlob:
        """Layer ``index`` from the engine's save, made once for all layers that need it."""
        with self._lock:
            if self._saved is None:
                self._saved = self.spool(workdir, progress)
        return self._saved.layers()[index]

    def spool(self, workdir: Path, progress: Callable[[int], None] | None = None) -> DockerArchive:
        path, image_id = workdir / "daemon-save.tar", str(self._get()["Id"])
        api = self._connected().sdk_client(SAVE_TIMEOUT).api  # a large image's save can be slow to start
        with path.open("wb") as out:
            for chunk in api.get_image(image_id, chunk_size=1 << 20):
                out.write(chunk)
                if progress:
                    progress(len(chunk))
        # The engine's image ID content-addresses the image: the config digest (podman, classic Docker) or,
        # with Docker's containerd store, the manifest digest. Either way it is a sound cache key.
        return DockerArchive(path, None, self.text)



READERS: dict[str, Reader] = {"docker-daemon": lambda spec: DaemonSource(spec.text, spec.ref or "")}
