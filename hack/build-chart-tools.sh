#!/usr/bin/env bash
# Provides helm and kubeconform for the chart tests (tests/chart: helm lint, helm template,
# offline schema validation of the rendered manifests).
#
#   hack/build-chart-tools.sh        # prints the folder holding both binaries on its last stdout line
#
# 1. If CHART_TOOLS_ASSETS names a folder holding both binaries, it is used as is.
# 2. Otherwise they are built from the Go modules pinned in hack/tools/helm and
#    hack/tools/kubeconform into
#    ${CHAOSFLOW_CACHE_DIR:-$HOME/.cache/chaosflow}/chart-tools/helm-<v>_kubeconform-<v>/
#    and reused by later calls while the stamp there matches the pinned go.mod/go.sum files.
#
# Same conventions as hack/build-test-binaries.sh: progress and build output go to stderr,
# stdout carries only the folder. Exit codes: 0 ok, 2 Go missing or too old, 1 build failure.
set -euo pipefail

SCRIPT=build-chart-tools
BINARIES=(helm kubeconform)
# Bump when the build recipe below changes in a way that must invalidate cached binaries.
RECIPE=1
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HELM_MOD="$ROOT/hack/tools/helm"
KC_MOD="$ROOT/hack/tools/kubeconform"

use_assets_from_env CHART_TOOLS_ASSETS

HELM_VERSION="$(mod_version "$HELM_MOD/go.mod" helm.sh/helm/v3)"
KC_VERSION="$(mod_version "$KC_MOD/go.mod" github.com/yannh/kubeconform)"
# helm's default capabilities (KubeVersion) come from the client-go it is built with, as in its Makefile.
HELM_CLIENT_GO="$(mod_version "$HELM_MOD/go.mod" k8s.io/client-go)"
[[ -n "$HELM_VERSION" && -n "$KC_VERSION" && -n "$HELM_CLIENT_GO" ]] ||
    die 1 "cannot read the pinned versions from hack/tools/{helm,kubeconform}/go.mod"

# Everything that decides the binaries' content, except the Go toolchain.
setup_cache chart-tools "helm-${HELM_VERSION}_kubeconform-${KC_VERSION}" "$(
    printf 'recipe=%s helm=%s kubeconform=%s os=%s arch=%s\n' "$RECIPE" "$HELM_VERSION" "$KC_VERSION" \
        "$(uname -s)" "$(uname -m)"
    cd "$ROOT/hack/tools" && sha256sum helm/go.mod helm/go.sum kubeconform/go.mod kubeconform/go.sum
)"

require_go "$HELM_MOD/go.mod" "helm $HELM_VERSION and kubeconform $KC_VERSION" \
    "Install Go >= 1.26 or set CHART_TOOLS_ASSETS to a folder holding those two binaries."
lock_build

# The ldflags of helm's Makefile: version, and the Kubernetes version of its client-go
# (v0.37.x -> 1.37) as the default .Capabilities.KubeVersion and lint deprecation target.
k8s_minor="${HELM_CLIENT_GO#v0.}"
k8s_minor="${k8s_minor%%.*}"
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

start=$SECONDS
log "building helm $HELM_VERSION with $GO_VERSION (cold: ~2 min on 2 cores)"
(cd "$HELM_MOD" && go build -trimpath -ldflags="$helm_ldflags" -o "$WORK/helm" helm.sh/helm/v3/cmd/helm) >&2 ||
    die 1 "building helm failed (see the go output above)"
log "helm built after $((SECONDS - start))s"

log "building kubeconform $KC_VERSION"
(cd "$KC_MOD" && go build -trimpath -ldflags="-s -w -X main.version=$KC_VERSION" -o "$WORK/kubeconform" \
    github.com/yannh/kubeconform/cmd/kubeconform) >&2 ||
    die 1 "building kubeconform failed (see the go output above)"
log "all built after $((SECONDS - start))s"

"$WORK/helm" version --short >/dev/null 2>&1 || die 1 "the built helm does not run"
"$WORK/kubeconform" -v >/dev/null 2>&1 || die 1 "the built kubeconform does not run"

install_binaries
