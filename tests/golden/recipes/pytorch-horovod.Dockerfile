# Dockerfile for stack pytorch-horovod, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: TWCC Taiwania 2 guide (000) - pytorch_20.09-py3_horovod.def

FROM nvcr.io/nvidia/pytorch:22.11-py3

# Horovod from PyPI; the CUDA stub libcuda is on the library path for this step only
RUN export HOROVOD_GPU="CUDA" HOROVOD_GPU_OPERATIONS="NCCL" HOROVOD_NCCL_LINK="SHARED" HOROVOD_NCCL_INCLUDE="/usr/include" HOROVOD_NCCL_LIB="/usr/lib/x86_64-linux-gnu" HOROVOD_MPI_HOME="/usr/local/mpi" LD_LIBRARY_PATH="/usr/local/cuda/lib64/stubs:$LD_LIBRARY_PATH" HOROVOD_WITH_PYTORCH="1" HOROVOD_WITHOUT_TENSORFLOW="1" HOROVOD_WITHOUT_MXNET="1" HOROVOD_WITH_MPI="1" HOROVOD_WITHOUT_GLOO="1" && \
    pip install --no-cache-dir horovod==0.28.1

# check which frameworks, controllers and operations Horovod was built with
RUN export LD_LIBRARY_PATH="/usr/local/cuda/lib64/stubs:$LD_LIBRARY_PATH" && \
    horovodrun --check-build

LABEL io.ckit.stack="pytorch-horovod" \
    io.ckit.parameters="{\"horovod\":{\"check_build\":true,\"controllers\":[\"mpi\"],\"frameworks\":[\"pytorch\"],\"git_ref\":\"\",\"gpu_operations\":\"NCCL\",\"nccl_link\":\"SHARED\",\"source\":\"pypi\",\"version\":\"0.28.1\"},\"ngc-pytorch\":{\"release\":\"22.11\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="4b92da43d78cdb27b8c85e3f0b10c7142eb13e0eae1ff33083c8ea40f9984abc" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:22.11-py3"
