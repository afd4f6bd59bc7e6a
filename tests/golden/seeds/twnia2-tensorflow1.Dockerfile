# Dockerfile for stack tensorflow-horovod, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: TWCC Taiwania 2 guide (000) - tensorflow_20.09-tf1/tf2-py3; KISTI Neuron guide (001) Horovod TensorFlow

FROM nvcr.io/nvidia/tensorflow:20.09-tf1-py3

# check which frameworks, controllers and operations the image's Horovod was built with
RUN horovodrun --check-build

LABEL io.ckit.stack="tensorflow-horovod" \
    io.ckit.parameters="{\"horovod-check\":{},\"ngc-tensorflow\":{\"release\":\"20.09\",\"variant\":\"tf1\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="923f9c2ab5878d21a4d96302127090400bf143c4dc47914de0143362d077bb17" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/tensorflow:20.09-tf1-py3"
