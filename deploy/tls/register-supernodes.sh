#!/bin/sh
# One-shot (TLS overlay): register every SuperNode's public key with the SuperLink before the
# SuperNodes start, so that `--enable-supernode-auth` admits exactly these N devices.
# Keys come from deploy/certs.sh: $LEAKBED_CERTS/node-<i>.pub for i in 0..N-1. The defaults are
# the paths inside the compose service; tests/deploy/test_compose_processes.py sets local ones.
set -eu
n="${LEAKBED_SUPERNODES:?set LEAKBED_SUPERNODES}"
certs="${LEAKBED_CERTS:-/certs}"
ca="${LEAKBED_CA:-/run/secrets/ca.crt}"
superlink="${LEAKBED_SUPERLINK:-superlink:9093}"
export FLWR_HOME="${FLWR_HOME:-/tmp/flwr-home}"
mkdir -p "$FLWR_HOME"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "compose"
[superlink.compose]
address = "$superlink"
root-certificates = "$ca"
TOML
i=0
while [ "$i" -lt "$n" ]; do
  key="$certs/node-$i.pub"
  [ -r "$key" ] || { echo "register-supernodes: $key missing: run bash deploy/certs.sh deploy/certs $n" >&2; exit 2; }
  flwr supernode register "$key" compose
  i=$((i + 1))
done
echo "register-supernodes: registered $n SuperNode keys with $superlink"
