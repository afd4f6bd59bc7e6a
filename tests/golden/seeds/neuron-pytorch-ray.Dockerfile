# Dockerfile for stack pytorch-ray, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: KISTI Neuron guide (001) Ray cluster

FROM nvcr.io/nvidia/pytorch:24.06-py3

RUN python3 -m pip install --no-cache-dir 'ray[default,tune]==2.9.3'

RUN python3 -m pip install --no-cache-dir tabulate==0.9.0 tensorboardX==2.6.2.2

LABEL io.ckit.stack="pytorch-ray" \
    io.ckit.parameters="{\"ngc-pytorch\":{\"release\":\"24.06\"},\"pip\":{\"packages\":[\"tabulate==0.9.0\",\"tensorboardX==2.6.2.2\"]},\"ray\":{\"extras\":\"default,tune\",\"version\":\"2.9.3\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="737d4edda63db44dbe2b0536ee5c39741ea8b6fe1df35019f2b091964efea7b1" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:24.06-py3"
