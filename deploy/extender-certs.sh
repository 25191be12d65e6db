#!/usr/bin/env bash
# Certificates for the extender verbs' mutual TLS (docs/kubernetes.md, "Authenticated verbs"), with openssl only:
#   ca.crt/ca.key          a private CA (10 years) that signs both certificates below
#   server.crt/server.key  quasched's listener: SAN IP 127.0.0.1 and localhost (kube-scheduler calls its sidecar there)
#   client.crt/client.key  kube-scheduler's client certificate (extendedKeyUsage clientAuth)
# Usage: deploy/extender-certs.sh DIR [DAYS]
# Then, in the cluster:
#   kubectl -n quasched create secret generic quasched-extender-tls --from-file=DIR/ca.crt \
#     --from-file=DIR/server.crt --from-file=DIR/server.key --from-file=DIR/client.crt --from-file=DIR/client.key
# Keep ca.key out of the cluster (it is not needed there); re-run to rotate, then restart the pods.
# ECDSA P-256 keys: kube-scheduler opens a new connection (a full handshake) for most concurrent binds, and an
# ECDSA handshake costs quasched a fraction of an RSA-2048 one.
set -euo pipefail
dir="${1:?usage: extender-certs.sh DIR [DAYS]}"
days="${2:-365}"
mkdir -p "$dir"
cd "$dir"
umask 077
ext=$(mktemp)
trap 'rm -f "$ext" server.csr client.csr ca.srl' EXIT
key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)
openssl req -x509 "${key[@]}" -nodes -keyout ca.key -out ca.crt -days 3650 -sha256 \
    -subj "/CN=quasched extender CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
sign() {  # name, subject, extensions
    openssl req "${key[@]}" -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    printf '%s\n' "$3" > "$ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days "$days" \
        -sha256 -extfile "$ext" 2>/dev/null
}
sign server "/CN=quasched-extender" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature"
sign client "/CN=kube-scheduler" \
    "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature"
chmod 644 ca.crt server.crt client.crt
echo "extender-certs: ca.crt server.crt/.key client.crt/.key in $dir"
