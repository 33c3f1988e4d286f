# The leakbed app image with CUDA (GPU overlay): PyPI's torch build, which ships the CUDA
# runtime libraries; the host's NVIDIA driver comes in through the compose device reservation.
# Flower's images are CPU only, so this one starts from Python and runs as Flower's uid 49999.
FROM python:3.11.14-slim-bookworm

RUN groupadd --gid 49999 app \
    && useradd --uid 49999 --gid 49999 --create-home --shell /usr/sbin/nologin app \
    && mkdir -p /data /app \
    && chown app:app /data /app
USER 49999:49999
WORKDIR /app
ENV VIRTUAL_ENV=/home/app/venv \
    PATH=/home/app/venv/bin:$PATH
RUN python -m venv /home/app/venv

COPY --chown=app:app pyproject.toml README.md ./
COPY --chown=app:app proto proto
COPY --chown=app:app core core
COPY --chown=app:app leakbed leakbed
COPY --chown=app:app referee referee
COPY --chown=app:app server server
COPY --chown=app:app client client
COPY --chown=app:app attacks attacks
COPY --chown=app:app defenses defenses
COPY --chown=app:app configs configs
# Every dependency is pinned exactly (==) in pyproject.toml, which hadolint cannot see (DL3013).
# hadolint ignore=DL3013
RUN python -m pip install --no-cache-dir ".[build]" \
    && python -m grpc_tools.protoc -I proto --python_out=. --grpc_python_out=. proto/attacks/service.proto \
    && python -m pip install --no-cache-dir --no-deps --force-reinstall .

ENV LEAKBED_HOME=/data \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

ENTRYPOINT ["flower-superexec"]
