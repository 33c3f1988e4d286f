# Flower 1.42's SuperLink, SuperNode and SuperExec on a Debian bookworm base (Python 3.11) built
# from Debian packages: the stand-in for flwr/superlink, flwr/supernode and flwr/superexec where no
# container registry is reachable. Same layout as Flower's images: a venv at /python/venv owned by
# the user `app` (uid 49999), workdir /app, `flower-superexec` as entrypoint.
#   built by `leakbed compose build --base local` (leakbed/deploy/base/debian-rootfs.sh makes DEBIAN_IMAGE)
ARG DEBIAN_IMAGE=localhost/leakbed-debian:bookworm
FROM ${DEBIAN_IMAGE}
ARG FLWR_VERSION=1.42.0
RUN useradd --uid 49999 --user-group --create-home app \
    && python3 -m venv /python/venv \
    && mkdir -p /app \
    && chown -R app:app /python /app
ENV PATH=/python/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1
USER 49999:49999
# An optional build secret `ca` (a CA bundle) lets pip through a TLS-inspecting proxy.
RUN --mount=type=secret,id=ca,required=false,mode=0444 \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && python -m pip install --no-cache-dir "flwr==${FLWR_VERSION}"
WORKDIR /app
ENTRYPOINT ["flower-superexec"]
