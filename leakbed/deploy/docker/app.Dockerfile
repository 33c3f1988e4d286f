# The leakbed app image (CPU): Flower's SuperExec with leakbed and its pinned dependencies.
# One image serves the ServerApp SuperExec, every ClientApp SuperExec and the attack workers.
# `leakbed compose build` builds it from a context it stages from the installed package (leakbed.build_context):
# requirements.txt (the installed leakbed's pins) and wheels/ (leakbed repacked from its installed files, and a
# wheel of each `--plugin` package). No checkout is needed, and nothing else is sent.
# BASE_IMAGE: Flower's official SuperExec image by default; where no registry is reachable,
# `leakbed compose build --base local` passes a Flower base built from Debian packages
# (leakbed/deploy/base/flwr.Dockerfile). TORCH_INDEX: an extra package index for torch (PyTorch's CPU
# wheels by default; empty = PyPI's CUDA build, which also runs on CPU).
ARG BASE_IMAGE=flwr/superexec:1.42.0-py3.11-ubuntu24.04

FROM ${BASE_IMAGE}
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

USER 0:0
# bubblewrap (and util-linux's prlimit and setpriv, libseccomp): an attack worker builds one sandbox per lane
# hadolint ignore=DL3008
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        bubblewrap util-linux libseccomp2 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data /attack-store /referee && chown app:app /data /attack-store /referee
USER 49999:49999
WORKDIR /app

# Dependencies first, from the list alone: this layer is reused until a pin changes (a code change
# rebuilds only the layers after it), and the cache mount keeps the wheels when one does. uv installs them
# (downloads, unpacking and byte code in parallel: 110 s of wall here where pip took 148 s); uv is a dependency
# of Flower's (uv>=0.13.5,<0.14) anyway. `unsafe-best-match` takes each package's best version over both
# indexes, as pip does. The optional build secret `ca` (a CA bundle) lets pip and uv through a TLS-inspecting
# proxy.
COPY --chown=app:app requirements.txt ./
# Every dependency is pinned exactly (==) in pyproject.toml, which hadolint cannot see (DL3013).
# hadolint ignore=DL3013,DL3042
RUN --mount=type=cache,target=/tmp/uv-cache,uid=49999,gid=49999 \
    --mount=type=secret,id=ca,required=false,mode=0444 \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; fi \
    && python -m pip install --no-cache-dir uv==0.13.9 \
    && python -m uv pip install --python "$(command -v python)" --cache-dir /tmp/uv-cache --link-mode copy \
        --compile-bytecode --index-strategy unsafe-best-match ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} \
        -r requirements.txt

# leakbed (the installed package, as a wheel) and the plugins (`leakbed compose build --plugin PATH`)
COPY --chown=app:app wheels wheels
RUN python -m pip install --no-cache-dir --no-deps wheels/*.whl

ENV LEAKBED_HOME=/data \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    PYTHONUNBUFFERED=1

ENTRYPOINT ["flower-superexec"]
