#!/usr/bin/env bash
# Provides etcd, kube-apiserver and kubectl for the e2e tests (the envtest convention).
#
#   hack/build-test-binaries.sh        # prints the asset folder on its last stdout line
#
# 1. If KUBEBUILDER_ASSETS names a folder holding all three binaries, it is used as is.
# 2. Otherwise the binaries are built from the Go modules pinned in hack/tools/kube and
#    hack/tools/etcd into ${CHAOSFLOW_CACHE_DIR:-$HOME/.cache/chaosflow}/kubebuilder-assets/k8s-<version>/
#    and reused by later calls while the stamp there matches the pinned go.mod/go.sum files.
#
# Progress and build output go to stderr; stdout carries only the asset folder.
# Exit codes: 0 ok, 2 Go missing or too old, 1 build failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KUBE_MOD="$ROOT/hack/tools/kube"
ETCD_MOD="$ROOT/hack/tools/etcd"
BINARIES=(etcd kube-apiserver kubectl)
# Bump when the build recipe below changes in a way that must invalidate cached binaries.
RECIPE=1

log() { printf 'build-test-binaries: %s\n' "$*" >&2; }
die() {
    local code="$1"
    shift
    printf 'build-test-binaries: error: %s\n' "$*" >&2
    exit "$code"
}

has_all() {
    local dir="$1" b
    for b in "${BINARIES[@]}"; do
        [[ -x "$dir/$b" && -f "$dir/$b" ]] || return 1
    done
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
    if has_all "$KUBEBUILDER_ASSETS"; then
        log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
        printf '%s\n' "$KUBEBUILDER_ASSETS"
        exit 0
    fi
    log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of: ${BINARIES[*]}; building them instead"
fi

mod_version() { # mod_version GO_MOD_FILE MODULE_PATH -> version required there
    awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}

K8S_VERSION="$(mod_version "$KUBE_MOD/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(mod_version "$ETCD_MOD/go.mod" go.etcd.io/etcd/server/v3)"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" ]] || die 1 "cannot read the pinned versions from hack/tools/*/go.mod"

CACHE_DIR="${CHAOSFLOW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/chaosflow}"
ASSETS="$CACHE_DIR/kubebuilder-assets/k8s-$K8S_VERSION"
STAMP_FILE="$ASSETS/.stamp"

# Everything that decides the binaries' content, except the Go toolchain (so that cached
# binaries stay usable on a machine without Go).
stamp() {
    printf 'recipe=%s k8s=%s etcd=%s os=%s arch=%s\n' "$RECIPE" "$K8S_VERSION" "$ETCD_VERSION" \
        "$(uname -s)" "$(uname -m)"
    (cd "$ROOT/hack/tools" && sha256sum kube/go.mod kube/go.sum etcd/go.mod etcd/go.sum)
}
WANT_STAMP="$(stamp)"

is_current() { has_all "$ASSETS" && [[ -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$WANT_STAMP" ]]; }

if is_current; then
    log "up to date: $ASSETS"
    printf '%s\n' "$ASSETS"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    die 2 "Go is not installed (no 'go' on PATH), so etcd, kube-apiserver and kubectl cannot be built.
Install Go >= 1.26 (e.g. 'apt-get install golang-go' if new enough) or set KUBEBUILDER_ASSETS
to a folder holding those three binaries."
fi

GO_VERSION="$(go env GOVERSION 2>/dev/null || true)"
need_go="$(awk '$1 == "go" { print $2; exit }' "$KUBE_MOD/go.mod")"
if [[ "$GO_VERSION" =~ ^go([0-9]+)\.([0-9]+) && "$(go env GOTOOLCHAIN)" == local* ]]; then
    have=$((BASH_REMATCH[1] * 1000 + BASH_REMATCH[2]))
    IFS=. read -r nmaj nmin _ <<<"$need_go"
    if ((have < nmaj * 1000 + nmin)); then
        die 2 "$GO_VERSION is too old: kubernetes $K8S_VERSION needs go >= $need_go (unset GOTOOLCHAIN=local to let go fetch it)"
    fi
fi

mkdir -p "$CACHE_DIR/kubebuilder-assets"

# One build at a time per cache folder (parallel test sessions, pytest-xdist workers).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE_DIR/kubebuilder-assets/.lock"
    flock -n 9 || { log "another build is running, waiting for it" && flock 9; }
    if is_current; then # another process built it while we waited
        log "up to date: $ASSETS"
        printf '%s\n' "$ASSETS"
        exit 0
    fi
fi

WORK="$(mktemp -d "$CACHE_DIR/kubebuilder-assets/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# A go.work above this repo, GOFLAGS=-mod=vendor or cgo must not change what gets built.
export GOWORK=off CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"

k8s_minor="${K8S_VERSION#v1.}"
k8s_minor="${k8s_minor%%.*}"
version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
    version_ldflags+=" -X $pkg.gitTreeState=clean"
done

start=$SECONDS
log "building etcd $ETCD_VERSION with $GO_VERSION (cold: ~1 min on 2 cores)"
(cd "$ETCD_MOD" && go build -trimpath -ldflags="-s -w" -o "$WORK/etcd" go.etcd.io/etcd/server/v3) >&2 ||
    die 1 "building etcd failed (see the go output above)"
log "etcd built after $((SECONDS - start))s"

log "building kube-apiserver and kubectl $K8S_VERSION (cold: ~6 min on 2 cores)"
(cd "$KUBE_MOD" && go build -trimpath -ldflags="-s -w$version_ldflags" -o "$WORK/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl) >&2 ||
    die 1 "building kube-apiserver/kubectl failed (see the go output above)"
log "all built after $((SECONDS - start))s"

mkdir -p "$ASSETS"
rm -f "$STAMP_FILE"
for b in "${BINARIES[@]}"; do
    mv -f "$WORK/$b" "$ASSETS/$b"
done
printf '%s\n' "$WANT_STAMP" >"$STAMP_FILE"
log "installed into $ASSETS"
printf '%s\n' "$ASSETS"
