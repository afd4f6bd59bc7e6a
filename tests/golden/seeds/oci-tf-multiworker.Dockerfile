# Dockerfile for stack tf-multiworker, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: Oracle Cloud HPC guide (002) MultiWorkerMirroredStrategy; KISTI Neuron guide (001) Tensorflow Distribute

FROM nvcr.io/nvidia/tensorflow:24.06-tf2-py3

LABEL io.ckit.stack="tf-multiworker" \
    io.ckit.parameters="{\"ngc-tensorflow\":{\"release\":\"24.06\",\"variant\":\"tf2\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="d124cf3c4b040dcb48f3304a43509c2127ac0ceb4159007638671e783e003778" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/tensorflow:24.06-tf2-py3"
