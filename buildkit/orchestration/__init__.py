"""Orchestration: plan (pure) -> execute -> result object, for work that spans the layers below.

``build`` turns a stack into an engine image and its artifacts (render, engine, conversion, store). The cluster
cache's fetch and stage (:mod:`buildkit.cache`) sit in the same band.
"""
