# Dockerfile for stack demo, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.

FROM localhost/debian:bookworm

ENV CKIT_DEMO_GREETING="hello from ckit" \
    PATH="/opt/ckit-demo:$PATH"

COPY ["files/1-demo", "/opt/ckit-demo"]

RUN chmod 0755 /opt/ckit-demo/hello && \
    hello --version > /opt/ckit-demo/build-check.txt

ENTRYPOINT ["hello"]
CMD ["--greet"]

LABEL io.ckit.stack="demo" \
    io.ckit.parameters="{\"debian\":{\"registry\":\"localhost\",\"release\":\"bookworm\"},\"env\":{\"vars\":[\"CKIT_DEMO_GREETING=hello from ckit\",\"PATH=/opt/ckit-demo:\$PATH\"]},\"files\":{\"dest\":\"/opt/ckit-demo\",\"src\":\"files/demo\"},\"labels\":{\"values\":[\"org.opencontainers.image.title=ckit demo\"]},\"shell\":{\"commands\":[\"chmod 0755 /opt/ckit-demo/hello\",\"hello --version > /opt/ckit-demo/build-check.txt\"]}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="cdd38f2e25394df0b9fe61ef6773be7ffa6605c58fa2ba81bf3e481055fc586b" \
    org.opencontainers.image.base.name="localhost/debian:bookworm" \
    org.opencontainers.image.title="ckit demo"
