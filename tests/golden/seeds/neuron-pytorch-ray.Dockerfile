# Dockerfile for stack pytorch-ray, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: KISTI Neuron guide (001) Ray cluster

FROM nvcr.io/nvidia/pytorch:24.06-py3

RUN python3 -m pip install --no-cache-dir 'ray[default,tune]==2.9.3'

RUN python3 -m pip install --no-cache-dir tabulate==0.9.0 tensorboardX==2.6.2.2

LABEL io.ckit.stack="pytorch-ray" \
    io.ckit.parameters="{\"ngc-pytorch\":{\"release\":\"24.06\"},\"pip\":{\"cert\":\"\",\"index_url\":\"\",\"packages\":[\"tabulate==0.9.0\",\"tensorboardX==2.6.2.2\"],\"trusted_host\":\"\"},\"ray\":{\"extras\":\"default,tune\",\"version\":\"2.9.3\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="2b10476255df648d36aa92abc5ee90771845fb3c805aec78feafcc063b3a1e56" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:24.06-py3"
