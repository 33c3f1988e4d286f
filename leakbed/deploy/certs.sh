#!/usr/bin/env bash
# Certificates for a TLS deployment with SuperNode authentication (local processes or compose).
#
#   bash leakbed/deploy/certs.sh OUTDIR [N_SUPERNODES]     (N defaults to 3)
#
# Writes into OUTDIR (every key ECDSA P-256: 128-bit security, as RSA-3072, made in milliseconds where
# four RSA-3072 keys took 3 s of CPU):
#   ca.crt, ca.key            a private CA (self-signed, 2 years)
#   server.pem, server.key    the SuperLink's certificate, signed by the CA, for the names
#                             localhost, superlink and 127.0.0.1 (plus $LEAKBED_CERT_SANS, e.g.
#                             "DNS:link.example.org,IP:10.0.0.5")
#   worker.pem, worker.key    the attack workers' certificate (`leakbed attack-worker --ssl-certfile
#                             --ssl-keyfile`), signed by the CA, for localhost, 127.0.0.1 and the
#                             compose names attack-worker-0 .. attack-worker-<W-1>, W =
#                             $LEAKBED_CERT_WORKERS (default 8); the pool checks it against ca.crt
#   pool.pem, pool.key        the ServerApp pool's client certificate (workers.tls_cert / tls_key),
#                             signed by the CA: the workers (--ssl-ca-certfile) serve no client without one
#   node-<i>, node-<i>.pub    one ECDSA key pair per SuperNode (i = 0..N-1), made with ssh-keygen
#                             as in Flower's docs: the .pub is registered with
#                             `flwr supernode register`, the private key goes to the SuperNode's
#                             --auth-supernode-private-key
# An existing CA, server and worker certificate are kept (so running it again for more nodes is safe);
# missing node keys are added.
set -euo pipefail

usage() { echo "usage: bash leakbed/deploy/certs.sh OUTDIR [N_SUPERNODES]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
out=$1
n=${2:-3}
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -le 10000 ] || { echo "certs.sh: N_SUPERNODES must be an integer 0..10000 (got '$n')" >&2; exit 2; }
w=${LEAKBED_CERT_WORKERS:-8}
[[ "$w" =~ ^[0-9]+$ ]] && [ "$w" -le 1000 ] || { echo "certs.sh: LEAKBED_CERT_WORKERS must be an integer 0..1000 (got '$w')" >&2; exit 2; }
for tool in openssl ssh-keygen; do
  command -v "$tool" >/dev/null 2>&1 || { echo "certs.sh: $tool not found on PATH" >&2; exit 2; }
done
mkdir -p "$out"
cd "$out"
umask 077

if [ ! -s ca.crt ] || [ ! -s ca.key ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 -nodes -days 730 -subj "/CN=leakbed test CA" \
    -keyout ca.key -out ca.crt 2>/dev/null
fi
if [ ! -s server.pem ] || [ ! -s server.key ]; then
  sans="DNS:localhost,DNS:superlink,IP:127.0.0.1,IP:::1${LEAKBED_CERT_SANS:+,$LEAKBED_CERT_SANS}"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 -nodes -subj "/CN=superlink" -keyout server.key -out server.csr 2>/dev/null
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' \
    "$sans" > server.ext
  openssl x509 -req -sha256 -days 730 -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -extfile server.ext -out server.pem 2>/dev/null
  rm -f server.csr server.ext ca.srl
fi
if [ ! -s worker.pem ] || [ ! -s worker.key ]; then
  sans="DNS:localhost,IP:127.0.0.1"
  j=0
  while [ "$j" -lt "$w" ]; do
    sans="$sans,DNS:attack-worker-$j"
    j=$((j + 1))
  done
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 -nodes -subj "/CN=attack-worker" -keyout worker.key -out worker.csr 2>/dev/null
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' \
    "$sans" > worker.ext
  openssl x509 -req -sha256 -days 730 -in worker.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -extfile worker.ext -out worker.pem 2>/dev/null
  rm -f worker.csr worker.ext ca.srl
fi
if [ ! -s pool.pem ] || [ ! -s pool.key ]; then
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 -nodes -subj "/CN=leakbed attack pool" -keyout pool.key -out pool.csr 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n' > pool.ext
  openssl x509 -req -sha256 -days 730 -in pool.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -extfile pool.ext -out pool.pem 2>/dev/null
  rm -f pool.csr pool.ext ca.srl
fi
openssl verify -CAfile ca.crt server.pem worker.pem pool.pem >/dev/null

i=0
while [ "$i" -lt "$n" ]; do
  if [ ! -s "node-$i" ]; then
    ssh-keygen -q -t ecdsa -b 384 -N "" -C "leakbed-supernode-$i" -f "node-$i"
  fi
  i=$((i + 1))
done
# certificates and public keys are readable by the containers' user (uid 49999); private keys stay 0600
chmod 644 ca.crt server.pem worker.pem pool.pem node-*.pub 2>/dev/null || true
echo "certs.sh: CA, SuperLink, attack-worker and pool certificates and $n SuperNode key pairs in $(pwd)"
