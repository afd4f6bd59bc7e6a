# Dockerfile for stack tensorflow-horovod, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: TWCC Taiwania 2 guide (000) - tensorflow_20.09-tf1/tf2-py3; KISTI Neuron guide (001) Horovod TensorFlow

FROM nvcr.io/nvidia/tensorflow:24.06-tf2-py3

# check which frameworks, controllers and operations the image's Horovod was built with
RUN horovodrun --check-build

LABEL io.ckit.stack="tensorflow-horovod" \
    io.ckit.parameters="{\"horovod-check\":{},\"ngc-tensorflow\":{\"release\":\"24.06\",\"variant\":\"tf2\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="068dfc01cb389b84ffff93c8dce19af538fd03d9ebf7c9dc4ecf21e704cb566f" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/tensorflow:24.06-tf2-py3"
