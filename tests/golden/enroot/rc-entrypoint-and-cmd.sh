# enroot-provenance: docker://registry-1.docker.io#library/ubuntu:24.04
# maintainer NVIDIA CORPORATION
# com.nvidia.build 1 2

mkdir -p "/workspace" 2> /dev/null
cd "/workspace" && unset OLDPWD || exit 1

if [ -s /etc/rc.local ]; then
    . /etc/rc.local
fi

if [ $# -gt 0 ]; then
    exec '/opt/nvidia/nvidia_entrypoint.sh' "$@"
else
    exec '/opt/nvidia/nvidia_entrypoint.sh' 'python' '-c' 'print('\''hi'\'')'
fi
