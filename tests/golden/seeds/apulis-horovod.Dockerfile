# Dockerfile for stack horovod-apulis, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.
# Reproduces: Apulis AI platform guide (003) - apulistech/horovod:0.19.2-tf2.2.0-torch1.5.0-py3.6.9-gpu

FROM apulistech/horovod:0.19.2-tf2.2.0-torch1.5.0-py3.6.9-gpu

# check which frameworks, controllers and operations the image's Horovod was built with
RUN horovodrun --check-build

LABEL io.ckit.stack="horovod-apulis" \
    io.ckit.parameters="{\"apulis-horovod\":{\"tag\":\"0.19.2-tf2.2.0-torch1.5.0-py3.6.9-gpu\"},\"horovod-check\":{}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="bf415d1fcdcbdd9fa5746464d4071ba6c2aa69d23ca8cdf46326c8551105043f" \
    org.opencontainers.image.base.name="apulistech/horovod:0.19.2-tf2.2.0-torch1.5.0-py3.6.9-gpu"
