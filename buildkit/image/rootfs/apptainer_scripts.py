"""The fixed shell scripts of a ``/.singularity.d`` tree (what apptainer's base environment step writes).

ckit's own script bodies with the behaviour the apptainer/singularity runtimes expect. Current runtimes run
their embedded action script and only *source* ``env/*.sh``; the ``actions/*`` files serve older runtimes
and direct invocation (``/.run``, ``/.exec``…).
"""

from __future__ import annotations

_HEAD = "#!/bin/sh\n# Added by ckit for apptainer/singularity. {what}\n"

_SOURCE_ENV = """\
for script in /.singularity.d/env/*.sh; do
    if [ -f "$script" ]; then
        # shellcheck source=/dev/null
        . "$script"
    fi
done
"""

BASE_ENV = _HEAD.format(what="Base environment: the runtime sources env/*.sh in name order.") + (
    "# Image variables are in 10-docker2singularity.sh, custom code goes to 90-environment.sh.\n"
)

ENVIRONMENT = _HEAD.format(what="Environment of the container.") + "# Custom environment shell code should follow\n"

APPS_ENV = _HEAD.format(what="Environment of the SCIF app named by SINGULARITY_APPNAME, if any.") + """\
if [ -n "${SINGULARITY_APPNAME:-}" ]; then
    export SINGULARITY_APPNAME
    app="/scif/apps/${SINGULARITY_APPNAME}"
    if [ ! -d "$app/" ]; then
        echo "Could not locate the container application: ${SINGULARITY_APPNAME}"
        exit 1
    fi
    SCIF_APPS=/scif/apps
    SCIF_APPROOT="$app"
    export SCIF_APPS SCIF_APPROOT
    PATH="$app:/scif/apps/singularity:$PATH"
    for dir in "$app" /scif/apps/singularity; do
        if [ -d "$dir/bin" ]; then
            PATH="$dir/bin:$PATH"
            break
        fi
    done
    for dir in "$app" /scif/apps/singularity; do
        if [ -d "$dir/lib" ]; then
            LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
            export LD_LIBRARY_PATH
            break
        fi
    done
    for name in 01-base.sh 90-environment.sh; do
        for dir in "$app" /scif/apps/singularity; do
            if [ -f "$dir/scif/env/$name" ]; then
                # shellcheck source=/dev/null
                . "$dir/scif/env/$name"
                break
            fi
        done
    done
    export PATH
    unset app dir name
fi
"""

BASE_LAST = _HEAD.format(what="Library path for bound host libraries, and a default prompt.") + """\
if [ -z "${LD_LIBRARY_PATH:-}" ]; then
    LD_LIBRARY_PATH=/.singularity.d/libs
else
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/.singularity.d/libs"
fi
if [ -z "${PS1:-}" ]; then
    PS1="Apptainer> "
fi
export LD_LIBRARY_PATH PS1
"""

RUNTIME_VARS = _HEAD.format(what="PATH changes requested at run time (--env PREPEND_PATH/APPEND_PATH/PATH).") + """\
if [ -n "${SING_USER_DEFINED_PREPEND_PATH:-}" ]; then
    PATH="${SING_USER_DEFINED_PREPEND_PATH}:${PATH}"
fi
if [ -n "${SING_USER_DEFINED_APPEND_PATH:-}" ]; then
    PATH="${PATH}:${SING_USER_DEFINED_APPEND_PATH}"
fi
if [ -n "${SING_USER_DEFINED_PATH:-}" ]; then
    PATH="${SING_USER_DEFINED_PATH}"
fi
unset SING_USER_DEFINED_PREPEND_PATH SING_USER_DEFINED_APPEND_PATH SING_USER_DEFINED_PATH
export PATH
"""

ACTION_EXEC = _HEAD.format(what="Action `exec`: load the environment, run the arguments.") + _SOURCE_ENV + """\
exec "$@"
"""

ACTION_RUN = _HEAD.format(what="Action `run`: load the environment, start the runscript.") + _SOURCE_ENV + """\
if [ -n "${SINGULARITY_APPNAME:-}" ]; then
    for script in "/scif/apps/${SINGULARITY_APPNAME}/scif/runscript" /scif/apps/singularity/scif/runscript; do
        if [ -x "$script" ]; then
            exec "$script" "$@"
        fi
    done
    echo "No runscript for contained app: ${SINGULARITY_APPNAME}"
    exit 1
elif [ -x /.singularity.d/runscript ]; then
    exec /.singularity.d/runscript "$@"
fi
echo "No runscript found, executing /bin/sh"
exec /bin/sh "$@"
"""

ACTION_SHELL = _HEAD.format(what="Action `shell`: load the environment, start a shell.") + _SOURCE_ENV + """\
if [ -n "${SINGULARITY_SHELL:-}" ] && [ -x "$SINGULARITY_SHELL" ]; then
    exec "$SINGULARITY_SHELL" "$@"
elif [ -x /bin/bash ]; then
    SHELL=/bin/bash
    PS1="Apptainer ${APPTAINER_NAME:-}:\\\\w> "
    export SHELL PS1
    exec /bin/bash --norc "$@"
elif [ -x /bin/sh ]; then
    SHELL=/bin/sh
    export SHELL
    exec /bin/sh "$@"
fi
echo "ERROR: /bin/sh does not exist in container" 1>&2
exit 1
"""

ACTION_START = _HEAD.format(what="Action `start`: resume PID 1, load the environment, run the startscript.") + """\
kill -CONT 1
""" + _SOURCE_ENV + """\
if [ -x /.singularity.d/startscript ]; then
    exec /.singularity.d/startscript
fi
"""

ACTION_TEST = _HEAD.format(what="Action `test`: load the environment, run the test script.") + _SOURCE_ENV + """\
if [ -n "${SINGULARITY_APPNAME:-}" ]; then
    for script in "/scif/apps/${SINGULARITY_APPNAME}/scif/test" /scif/apps/singularity/scif/test; do
        if [ -x "$script" ]; then
            exec "$script" "$@"
        fi
    done
    echo "No tests for contained app: ${SINGULARITY_APPNAME}"
    exit 1
elif [ -x /.singularity.d/test ]; then
    exec /.singularity.d/test "$@"
fi
echo "No test found in container, executing /bin/sh -c true"
exec /bin/sh -c true
"""

STARTSCRIPT = _HEAD.format(what="Started by `instance start`; this image defines no service.")

#: path under /.singularity.d → script text, all mode 0755.
FIXED_SCRIPTS = {
    "actions/exec": ACTION_EXEC,
    "actions/run": ACTION_RUN,
    "actions/shell": ACTION_SHELL,
    "actions/start": ACTION_START,
    "actions/test": ACTION_TEST,
    "env/01-base.sh": BASE_ENV,
    "env/90-environment.sh": ENVIRONMENT,
    "env/95-apps.sh": APPS_ENV,
    "env/99-base.sh": BASE_LAST,
    "env/99-runtimevars.sh": RUNTIME_VARS,
    "startscript": STARTSCRIPT,
}
