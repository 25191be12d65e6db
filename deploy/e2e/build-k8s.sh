#!/usr/bin/env bash
# Build kube-apiserver and kube-scheduler v1.20.2 from Debian's `kubernetes` source package,
# offline-friendly (Debian mirror only), into a cache OUTSIDE the repository.
# Idempotent: exits at once when both binaries exist.  See docs/kubernetes-e2e.md.
set -euo pipefail

CACHE="${QUASCHED_K8S_CACHE:-$HOME/.cache/quasched/k8s-v1.20.2}"
BIN="$CACHE/bin"
if [[ -x "$BIN/kube-apiserver" && -x "$BIN/kube-scheduler" ]]; then
    echo "build-k8s: binaries present in $BIN, nothing to do"
    exit 0
fi
mkdir -p "$BIN" "$CACHE/src"
start=$(date +%s)

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

need=()
command -v go >/dev/null || need+=(golang-go)
command -v etcd >/dev/null || need+=(etcd-server)
command -v rsync >/dev/null || need+=(rsync)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)

# A private sources list with deb-src enabled, so the machine's apt configuration stays untouched.
SRCLIST="$CACHE/apt-sources.list"
cat > "$SRCLIST" <<'LIST'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
LIST
APT_OPTS=(-o "Dir::Etc::sourcelist=$SRCLIST" -o "Dir::Etc::sourceparts=-" -o "APT::Get::List-Cleanup=0")

echo "build-k8s: apt-get update (private sources list $SRCLIST)"
$SUDO apt-get "${APT_OPTS[@]}" update -qq
if ((${#need[@]})); then
    echo "build-k8s: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${APT_OPTS[@]}" install -y -qq "${need[@]}"
fi

cd "$CACHE/src"
if ! ls kubernetes_*.orig.tar.* >/dev/null 2>&1; then
    echo "build-k8s: apt-get source --download-only kubernetes"
    apt-get "${APT_OPTS[@]}" source --download-only kubernetes
fi
TREE="$CACHE/src/tree"
if [[ ! -d "$TREE/cmd/kube-scheduler" ]]; then
    rm -rf "$TREE" "$CACHE/src/unpack"
    mkdir -p "$CACHE/src/unpack"
    orig=$(ls kubernetes_*.orig.tar.* | head -1)
    echo "build-k8s: unpacking $orig"
    tar -xf "$orig" -C "$CACHE/src/unpack"
    top=$(find "$CACHE/src/unpack" -mindepth 1 -maxdepth 1 -type d | head -1)
    mv "$top" "$TREE"
    rm -rf "$CACHE/src/unpack"
fi
grep -q 'gitVersion' "$TREE/hack/lib/version.sh" || true

export CGO_ENABLED=0 GO111MODULE=off
# Version stamping: the tarball has no .git; tell the build the version explicitly.
export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56

if [[ ! -x "$BIN/kube-scheduler" ]]; then
    GP="$CACHE/src/gopath"
    mkdir -p "$GP/src/k8s.io"
    ln -sfn "$TREE" "$GP/src/k8s.io/kubernetes"
    echo "build-k8s: go build kube-scheduler (GOPATH mode, ~3 min on 2 cores)"
    (cd "$GP/src/k8s.io/kubernetes" && GOPATH="$GP" go build \
        -ldflags "-X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitVersion=v1.20.2 -X k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version.gitVersion=v1.20.2" \
        -o "$BIN/kube-scheduler.tmp" ./cmd/kube-scheduler)
    mv "$BIN/kube-scheduler.tmp" "$BIN/kube-scheduler"
fi

if [[ ! -x "$BIN/kube-apiserver" ]]; then
    echo "build-k8s: make WHAT=cmd/kube-apiserver (~9 min on 2 cores)"
    (cd "$TREE" && make WHAT=cmd/kube-apiserver)
    out=$(find "$TREE/_output" -type f -name kube-apiserver -perm -u+x | head -1)
    cp "$out" "$BIN/kube-apiserver.tmp"
    mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
fi

"$BIN/kube-scheduler" --version || true
"$BIN/kube-apiserver" --version || true
echo "build-k8s: done in $(( $(date +%s) - start )) s; binaries in $BIN"
