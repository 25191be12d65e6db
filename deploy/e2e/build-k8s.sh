#!/usr/bin/env bash
# Build kube-apiserver, kube-scheduler and kubelet v1.20.2 from Debian's `kubernetes` source package
# into a cache OUTSIDE the repository, from the Debian archive this machine's apt is configured for.
# Idempotent: exits at once when the binaries exist.  See docs/kubernetes-e2e.md.
set -euo pipefail

CACHE="${QUASCHED_K8S_CACHE:-$HOME/.cache/quasched/k8s-v1.20.2}"
BIN="$CACHE/bin"
TARGETS=(kube-apiserver kube-scheduler kubelet)
#: what the binaries are built from; binaries of another build (e.g. with the vendored reflect2 1.0.1) are rebuilt
BUILD="kubernetes v1.20.2, Debian's reflect2 1.0.2 and json-iterator 1.1.12"
have_all() { for t in "${TARGETS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done; }
if [[ -d "$BIN" && "$(cat "$BIN/BUILD" 2>/dev/null)" != "$BUILD" ]]; then
    echo "build-k8s: binaries in $BIN are of another build; rebuilding"
    rm -f "${TARGETS[@]/#/$BIN/}"
fi
if have_all; then
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
# Sound versions of two vendored libraries (reflect2 1.0.1 faults at random under Go >= 1.18).
[[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ]] || need+=(golang-github-modern-go-reflect2-dev)
[[ -d /usr/share/gocode/src/github.com/json-iterator/go ]] || need+=(golang-github-json-iterator-go-dev)

# A private copy of the machine's own apt sources with deb-src added: no archive is named here, and the
# machine's apt configuration stays untouched.
APTDIR="$CACHE/apt"
rm -rf "$APTDIR" && mkdir -p "$APTDIR/sources.list.d"
: > "$APTDIR/sources.list"
if [[ -f /etc/apt/sources.list ]]; then
    sed -n 's/^deb \(.*\)$/deb \1\ndeb-src \1/p' /etc/apt/sources.list >> "$APTDIR/sources.list"
fi
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    case "$f" in
        *.sources) sed 's/^Types:[[:space:]]*deb[[:space:]]*$/Types: deb deb-src/' "$f" > "$APTDIR/sources.list.d/$(basename "$f")" ;;
        *.list) sed -n 's/^deb \(.*\)$/deb \1\ndeb-src \1/p' "$f" > "$APTDIR/sources.list.d/$(basename "$f")" ;;
    esac
done
APT_OPTS=(-o "Dir::Etc::sourcelist=$APTDIR/sources.list" -o "Dir::Etc::sourceparts=$APTDIR/sources.list.d"
          -o "APT::Get::List-Cleanup=0")

cd "$CACHE/src"
if ((${#need[@]})) || ! ls kubernetes_*.orig.tar.* >/dev/null 2>&1; then
    echo "build-k8s: apt-get update (private sources in $APTDIR)"
    $SUDO apt-get "${APT_OPTS[@]}" update -qq
fi
if ((${#need[@]})); then
    echo "build-k8s: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${APT_OPTS[@]}" install -y -qq "${need[@]}"
fi
if ! ls kubernetes_*.orig.tar.* >/dev/null 2>&1; then
    echo "build-k8s: apt-get source --download-only kubernetes"
    apt-get "${APT_OPTS[@]}" source --download-only kubernetes
fi
TREE="$CACHE/src/tree"
if [[ ! -f "$TREE/.quasched-patched" ]]; then
    rm -rf "$TREE" "$CACHE/src/unpack"
    mkdir -p "$CACHE/src/unpack"
    orig=$(ls kubernetes_*.orig.tar.* | head -1)
    echo "build-k8s: unpacking $orig"
    tar -xf "$orig" -C "$CACHE/src/unpack"
    top=$(find "$CACHE/src/unpack" -mindepth 1 -maxdepth 1 -type d | head -1)
    mv "$top" "$TREE"
    rm -rf "$CACHE/src/unpack"
    for lib in modern-go/reflect2 json-iterator/go; do
        echo "build-k8s: vendor/github.com/$lib <- Debian's $(basename "$(dirname /usr/share/gocode/src/github.com/$lib)")/$(basename $lib)"
        rm -rf "$TREE/vendor/github.com/$lib"
        rsync -a --exclude '*_test.go' --exclude '.git*' "/usr/share/gocode/src/github.com/$lib/" "$TREE/vendor/github.com/$lib/"
    done
    touch "$TREE/.quasched-patched"
fi

export CGO_ENABLED=0 GO111MODULE=off
# Version stamping: the tarball has no .git; tell the build the version explicitly.
export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
LDFLAGS="-X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitVersion=v1.20.2 -X k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version.gitVersion=v1.20.2"

GP="$CACHE/src/gopath"
mkdir -p "$GP/src/k8s.io"
ln -sfn "$TREE" "$GP/src/k8s.io/kubernetes"
for t in kube-scheduler kubelet; do
    if [[ ! -x "$BIN/$t" ]]; then
        echo "build-k8s: go build $t (GOPATH mode, a few minutes on 2 cores)"
        (cd "$GP/src/k8s.io/kubernetes" && GOPATH="$GP" go build -ldflags "$LDFLAGS" -o "$BIN/$t.tmp" "./cmd/$t")
        mv "$BIN/$t.tmp" "$BIN/$t"
    fi
done

if [[ ! -x "$BIN/kube-apiserver" ]]; then
    echo "build-k8s: make WHAT=cmd/kube-apiserver (~9 min on 2 cores)"
    (cd "$TREE" && make WHAT=cmd/kube-apiserver)
    out=$(find "$TREE/_output" -type f -name kube-apiserver -perm -u+x | head -1)
    cp "$out" "$BIN/kube-apiserver.tmp"
    mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
fi

echo "$BUILD" > "$BIN/BUILD"
for t in "${TARGETS[@]}"; do "$BIN/$t" --version || true; done
echo "build-k8s: done in $(( $(date +%s) - start )) s; binaries in $BIN"
