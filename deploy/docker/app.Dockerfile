# The leakbed app image (CPU): Flower's SuperExec with leakbed and its pinned dependencies.
# One image serves the ServerApp SuperExec, every ClientApp SuperExec and the attack workers.
# Build from the repository root: docker compose build (or docker build -f deploy/docker/app.Dockerfile .)
ARG FLWR_VERSION=1.41.0
FROM flwr/superexec:${FLWR_VERSION}-py3.11-ubuntu24.04

# Run stores and reports: the leakbed-data volume, shared by the ServerApp and the attack workers.
USER 0:0
RUN mkdir -p /data && chown app:app /data
USER 49999:49999
WORKDIR /app

# Dependencies first (cached while only the code changes): the exact pins of pyproject.toml, with
# torch and torchvision taken from PyTorch's CPU index (the same versions, without CUDA).
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
RUN python -m pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu ".[build]" \
    && python -m grpc_tools.protoc -I proto --python_out=. --grpc_python_out=. proto/attacks/service.proto \
    && python -m pip install --no-cache-dir --no-deps --force-reinstall .

ENV LEAKBED_HOME=/data \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    PYTHONUNBUFFERED=1

ENTRYPOINT ["flower-superexec"]
