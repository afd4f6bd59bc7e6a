# Dockerfile for stack hello, written by ckit 0.1.0.
# Generated from the recipe: change the recipe (or --set) rather than this file.

FROM docker.io/library/debian:bookworm

ENV CKIT_DEMO_GREETING="hello from ckit" \
    PATH="/opt/ckit-demo:$PATH"

COPY ["files/1-demo", "/opt/ckit-demo"]

RUN chmod 0755 /opt/ckit-demo/hello && \
    hello --version > /opt/ckit-demo/build-check.txt

ENTRYPOINT ["hello"]
CMD ["--greet"]

LABEL io.ckit.stack="hello" \
    io.ckit.parameters="{\"debian\":{\"registry\":\"docker.io/library\",\"release\":\"bookworm\"},\"env\":{\"vars\":[\"CKIT_DEMO_GREETING=hello from ckit\",\"PATH=/opt/ckit-demo:\$PATH\"]},\"files\":{\"dest\":\"/opt/ckit-demo\",\"src\":\"files/demo\"},\"labels\":{\"values\":[\"org.opencontainers.image.title=ckit hello\"]},\"shell\":{\"commands\":[\"chmod 0755 /opt/ckit-demo/hello\",\"hello --version > /opt/ckit-demo/build-check.txt\"]}}" \
    io.ckit.version="0.1.0" \
    io.ckit.fingerprint="2b5925a824ccef773dd2a8d01cb48e12829df4fc5fdd04a37ae5264c9db6fcc8" \
    org.opencontainers.image.base.name="docker.io/library/debian:bookworm" \
    org.opencontainers.image.title="ckit hello"
