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

SCRIPT=build-test-binaries
BINARIES=(etcd kube-apiserver kubectl)
# Bump when the build recipe below changes in a way that must invalidate cached binaries.
RECIPE=1
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
KUBE_MOD="$ROOT/hack/tools/kube"
ETCD_MOD="$ROOT/hack/tools/etcd"

use_assets_from_env KUBEBUILDER_ASSETS

K8S_VERSION="$(mod_version "$KUBE_MOD/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(mod_version "$ETCD_MOD/go.mod" go.etcd.io/etcd/server/v3)"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" ]] || die 1 "cannot read the pinned versions from hack/tools/*/go.mod"

# Everything that decides the binaries' content, except the Go toolchain (so that cached
# binaries stay usable on a machine without Go).
setup_cache kubebuilder-assets "k8s-$K8S_VERSION" "$(
    printf 'recipe=%s k8s=%s etcd=%s os=%s arch=%s\n' "$RECIPE" "$K8S_VERSION" "$ETCD_VERSION" \
        "$(uname -s)" "$(uname -m)"
    cd "$ROOT/hack/tools" && sha256sum kube/go.mod kube/go.sum etcd/go.mod etcd/go.sum
)"

require_go "$KUBE_MOD/go.mod" "etcd, kube-apiserver and kubectl $K8S_VERSION" \
    "Install Go >= 1.26 (e.g. 'apt-get install golang-go' if new enough) or set KUBEBUILDER_ASSETS
to a folder holding those three binaries."
lock_build

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

install_binaries
