# Dockerfile for stack pytorch-ddp, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: NSTDA TARA guide (004) and KISTI Neuron guide (001) PytorchDDP

FROM nvcr.io/nvidia/pytorch:24.06-py3

LABEL io.ckit.stack="pytorch-ddp" \
    io.ckit.parameters="{\"ngc-pytorch\":{\"release\":\"24.06\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="8d14d63f0e3b5fa5ddaae7b4be25150505dfdf6edf4e381a45da8ec9f8d8647c" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:24.06-py3"
