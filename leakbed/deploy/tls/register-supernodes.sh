#!/bin/sh
# One-shot (TLS overlay): register every SuperNode's public key with the SuperLink before the
# SuperNodes start, so that `--enable-supernode-auth` admits exactly these N devices.
# Keys come from leakbed/deploy/certs.sh: $LEAKBED_CERTS/node-<i>.pub for i in 0..N-1. The defaults are
# the paths inside the compose service; set the variables to run it outside one.
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
  [ -r "$key" ] || { echo "register-supernodes: $key missing: run bash leakbed/deploy/certs.sh leakbed/deploy/certs $n" >&2; exit 2; }
  # idempotent (a restart re-registers nothing) and patient (the SuperLink may still be starting)
  tries=0
  until out=$(flwr supernode register "$key" compose 2>&1); do
    case "$out" in
      *"already in use"*) out="node-$i was already registered"; break ;;
      *"unavailable"*) ;;
      *) echo "$out" >&2; exit 1 ;;
    esac
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || { echo "register-supernodes: SuperLink $superlink unreachable" >&2; exit 1; }
    sleep 2
  done
  echo "register-supernodes: $(printf '%s\n' "$out" | tail -n 1)"
  i=$((i + 1))
done
echo "register-supernodes: registered $n SuperNode keys with $superlink"
