# Dockerfile for stack pytorch-ddp, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: NSTDA TARA guide (004) and KISTI Neuron guide (001) PytorchDDP

FROM nvcr.io/nvidia/pytorch:22.11-py3

LABEL io.ckit.stack="pytorch-ddp" \
    io.ckit.parameters="{\"ngc-pytorch\":{\"release\":\"22.11\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="ff7244d838f66041bdffd13dcfe444d51dd813f8c86026215fe9fed081e3bc5a" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:22.11-py3"
