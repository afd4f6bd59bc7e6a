# Dockerfile for stack nccl-tests, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: Oracle Cloud HPC guide (002) - nccl-tests built inside nvcr.io/nvidia/tensorflow:24.06-tf2-py3

FROM nvcr.io/nvidia/tensorflow:24.06-tf2-py3

# nccl-tests built with MPI=1 against the image's MPI and NCCL ('which' replaced by 'type' as the image lacks it)
RUN git clone --depth 1 --branch v2.13.6 https://github.com/NVIDIA/nccl-tests.git /opt/nccl-tests && \
    sed -i 's/which/type/g' /opt/nccl-tests/src/Makefile && \
    make -C /opt/nccl-tests -j "$(nproc)" MPI=1 MPI_HOME=/usr/local/mpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr/lib/x86_64-linux-gnu

ENV PATH="/opt/nccl-tests/build:$PATH"

LABEL io.ckit.stack="nccl-tests" \
    io.ckit.parameters="{\"nccl-tests\":{\"prefix\":\"/opt/nccl-tests\",\"version\":\"v2.13.6\"},\"ngc-tensorflow\":{\"release\":\"24.06\",\"variant\":\"tf2\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="b73067446eb2579b4ae3c1ec93f6fdc8a372629df36cb994b190bf7c909c189f" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/tensorflow:24.06-tf2-py3"
