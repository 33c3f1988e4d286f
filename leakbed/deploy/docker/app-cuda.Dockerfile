# The leakbed app image with CUDA (GPU overlay): PyPI's torch build, which ships the CUDA
# runtime libraries; the host's NVIDIA driver comes in through the compose device reservation.
# Flower's images are CPU only, so this one starts from a plain Python 3.11 (BASE_IMAGE: the
# official python image by default, the Debian base of leakbed/deploy/base/debian-rootfs.sh where no
# registry is reachable) and runs as Flower's uid 49999. `leakbed compose build --gpu` builds it, on the
# context it stages from the installed package (see app.Dockerfile).
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

FROM ${BASE_IMAGE}

# bubblewrap (and util-linux's prlimit and setpriv, libseccomp): an attack worker builds one sandbox per lane
# hadolint ignore=DL3008
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        bubblewrap util-linux libseccomp2 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 49999 app \
    && useradd --uid 49999 --gid 49999 --create-home --shell /usr/sbin/nologin app \
    && mkdir -p /data /attack-store /referee /app \
    && chown app:app /data /attack-store /referee /app
USER 49999:49999
WORKDIR /app
ENV VIRTUAL_ENV=/home/app/venv \
    PATH=/home/app/venv/bin:$PATH
RUN python3 -m venv /home/app/venv

# Dependencies first, from the list alone: this layer is reused until a pin changes (a code change
# rebuilds only the layers after it), and pip's cache mount keeps the wheels when one does. The
# optional build secret `ca` (a CA bundle) lets pip through a TLS-inspecting proxy.
COPY --chown=app:app requirements.txt ./
# Every dependency is pinned exactly (==) in pyproject.toml, which hadolint cannot see (DL3013).
# hadolint ignore=DL3013,DL3042
RUN --mount=type=cache,target=/tmp/pip-cache,uid=49999,gid=49999 \
    --mount=type=secret,id=ca,required=false,mode=0444 \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && python -m pip install --cache-dir /tmp/pip-cache -r requirements.txt

# leakbed (the installed package, as a wheel) and the plugins (`leakbed compose build --plugin PATH`)
COPY --chown=app:app wheels wheels
RUN python -m pip install --no-cache-dir --no-deps wheels/*.whl

ENV LEAKBED_HOME=/data \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

ENTRYPOINT ["flower-superexec"]
