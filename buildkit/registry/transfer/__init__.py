"""What a push sends and a pull fetches, over the distribution client: images (:mod:`.images`: manifests and
indexes; read from archives and layouts by :mod:`.image_sources`, from an engine by :mod:`.engine_images`),
their layers uploaded once and gzipped on the way (:mod:`.layers`, :mod:`.compress`, :mod:`.known_digests`),
``.sif``/``.sqsh`` artifacts (:mod:`.artifacts`) and a push's annotations (:mod:`.annotations`)."""
