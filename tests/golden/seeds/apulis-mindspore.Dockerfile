# Dockerfile for stack mindspore-ascend, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: Apulis AI platform guide (003) - apulistech/mindspore:0.3.0-withtools

FROM apulistech/mindspore:0.3.0-withtools

ENV LD_LIBRARY_PATH="/usr/local/lib:/usr/lib:/usr/local/Ascend/fwkacllib/lib64:/usr/local/Ascend/driver/lib64/common:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/add-ons" \
    PYTHONPATH="/usr/local/Ascend/opp/op_impl/built-in/ai_core/tbe:$PYTHONPATH" \
    PATH="$PATH:/usr/local/Ascend/fwkacllib/ccec_compiler/bin" \
    ASCEND_OPP_PATH="/usr/local/Ascend/opp"

LABEL io.ckit.stack="mindspore-ascend" \
    io.ckit.parameters="{\"apulis-mindspore\":{\"tag\":\"0.3.0-withtools\"},\"ascend-env\":{\"ascend_home\":\"/usr/local/Ascend\"}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="8ddad9dc85bfc5f35e8498f2791488847911b635193b12c3250cfa0e481a451f" \
    org.opencontainers.image.base.name="apulistech/mindspore:0.3.0-withtools"
