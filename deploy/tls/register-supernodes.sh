#!/bin/sh
# One-shot (TLS overlay): register every SuperNode's public key with the SuperLink before the
# SuperNodes start, so that `--enable-supernode-auth` admits exactly these N devices.
# Keys come from deploy/certs.sh (mounted at /certs): /certs/node-<i>.pub for i in 0..N-1.
set -eu
n="${LEAKBED_SUPERNODES:?set LEAKBED_SUPERNODES}"
export FLWR_HOME=/tmp/flwr-home
mkdir -p "$FLWR_HOME"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "compose"
[superlink.compose]
address = "superlink:9093"
root-certificates = "/run/secrets/ca.crt"
TOML
i=0
while [ "$i" -lt "$n" ]; do
  key="/certs/node-$i.pub"
  [ -r "$key" ] || { echo "register-supernodes: $key missing: run deploy/certs.sh deploy/certs $n" >&2; exit 2; }
  flwr supernode register "$key" compose
  i=$((i + 1))
done
echo "register-supernodes: registered $n SuperNode keys"
