"""Orchestration: plan (pure) -> execute -> result object, for work that spans the layers below.

``build`` turns a stack into an engine image and its artifacts (render, engine, conversion, store); ``fetch`` puts
a registry image into a cache folder (the work the Pyxis importer, :mod:`buildkit.importer`, and ``ckit stage``
share) and ``stage`` puts an image where a site's compute nodes find it; ``executor`` is submitit's executor run
by ckit (``ckit.Executor``).
"""
