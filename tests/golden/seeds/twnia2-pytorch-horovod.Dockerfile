# Dockerfile for stack pytorch-horovod, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: TWCC Taiwania 2 guide (000) - pytorch_20.09-py3_horovod.def

FROM nvcr.io/nvidia/pytorch:20.09-py3

# Horovod from PyPI; the CUDA stub libcuda is on the library path for this step only
RUN export HOROVOD_GPU="CUDA" HOROVOD_GPU_OPERATIONS="NCCL" HOROVOD_NCCL_LINK="SHARED" HOROVOD_NCCL_INCLUDE="/usr/include" HOROVOD_NCCL_LIB="/usr/lib/x86_64-linux-gnu" HOROVOD_MPI_HOME="/usr/local/mpi" LD_LIBRARY_PATH="/usr/local/cuda/lib64/stubs:$LD_LIBRARY_PATH" HOROVOD_WITH_PYTORCH="1" HOROVOD_WITHOUT_TENSORFLOW="1" HOROVOD_WITHOUT_MXNET="1" HOROVOD_WITH_MPI="1" HOROVOD_WITHOUT_GLOO="1" && \
    pip install --no-cache-dir horovod==0.20.3

# check which frameworks, controllers and operations Horovod was built with
RUN export LD_LIBRARY_PATH="/usr/local/cuda/lib64/stubs:$LD_LIBRARY_PATH" && \
    horovodrun --check-build

LABEL io.ckit.stack="pytorch-horovod" \
    io.ckit.parameters="{\"horovod\":{\"check_build\":true,\"controllers\":[\"mpi\"],\"frameworks\":[\"pytorch\"],\"git_ref\":\"\",\"gpu_operations\":\"NCCL\",\"nccl_link\":\"SHARED\",\"source\":\"pypi\",\"version\":\"0.20.3\"},\"ngc-pytorch\":{\"release\":\"20.09\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="f95ebde566c63b77b2320d7558372160f5a975bb442532c855e12add0f0f9200" \
    org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:20.09-py3"
