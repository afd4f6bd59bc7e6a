"""Build engines: what an engine is (:mod:`.base`), one module per engine (docker, apptainer), each naming its
engine in ``ENGINES``, and the choice of one by name or ``auto`` (:mod:`.select`)."""
