# enroot-provenance: docker://registry-1.docker.io#library/ubuntu:24.04

mkdir -p "/" 2> /dev/null
cd "/" && unset OLDPWD || exit 1

if [ -s /etc/rc.local ]; then
    . /etc/rc.local
fi

if [ $# -gt 0 ]; then
    exec  "$@"
else
    exec  '/bin/bash'
fi
