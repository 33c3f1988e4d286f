# Prometheus from Debian's package, for machines that cannot pull prom/prometheus.
ARG DEBIAN_IMAGE=localhost/leakbed-debian:bookworm
FROM ${DEBIAN_IMAGE}
# bookworm's prometheus (2.42) is the version: a stable Debian release does not move it (DL3008).
# hadolint ignore=DL3008
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER 65534:65534
WORKDIR /prometheus
ENTRYPOINT ["prometheus"]
