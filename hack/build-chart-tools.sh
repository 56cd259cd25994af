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

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM_MOD="$ROOT/hack/tools/helm"
KC_MOD="$ROOT/hack/tools/kubeconform"
BINARIES=(helm kubeconform)
# Bump when the build recipe below changes in a way that must invalidate cached binaries.
RECIPE=1

log() { printf 'build-chart-tools: %s\n' "$*" >&2; }
die() {
    local code="$1"
    shift
    printf 'build-chart-tools: error: %s\n' "$*" >&2
    exit "$code"
}

has_all() {
    local dir="$1" b
    for b in "${BINARIES[@]}"; do
        [[ -x "$dir/$b" && -f "$dir/$b" ]] || return 1
    done
}

if [[ -n "${CHART_TOOLS_ASSETS:-}" ]]; then
    if has_all "$CHART_TOOLS_ASSETS"; then
        log "using CHART_TOOLS_ASSETS=$CHART_TOOLS_ASSETS"
        printf '%s\n' "$CHART_TOOLS_ASSETS"
        exit 0
    fi
    log "CHART_TOOLS_ASSETS=$CHART_TOOLS_ASSETS lacks one of: ${BINARIES[*]}; building them instead"
fi

mod_version() { # mod_version GO_MOD_FILE MODULE_PATH -> version required there
    awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}

HELM_VERSION="$(mod_version "$HELM_MOD/go.mod" helm.sh/helm/v3)"
KC_VERSION="$(mod_version "$KC_MOD/go.mod" github.com/yannh/kubeconform)"
# helm's default capabilities (KubeVersion) come from the client-go it is built with, as in its Makefile.
HELM_CLIENT_GO="$(mod_version "$HELM_MOD/go.mod" k8s.io/client-go)"
[[ -n "$HELM_VERSION" && -n "$KC_VERSION" && -n "$HELM_CLIENT_GO" ]] ||
    die 1 "cannot read the pinned versions from hack/tools/{helm,kubeconform}/go.mod"

CACHE_DIR="${CHAOSFLOW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/chaosflow}"
ASSETS="$CACHE_DIR/chart-tools/helm-${HELM_VERSION}_kubeconform-${KC_VERSION}"
STAMP_FILE="$ASSETS/.stamp"

# Everything that decides the binaries' content, except the Go toolchain.
stamp() {
    printf 'recipe=%s helm=%s kubeconform=%s os=%s arch=%s\n' "$RECIPE" "$HELM_VERSION" "$KC_VERSION" \
        "$(uname -s)" "$(uname -m)"
    (cd "$ROOT/hack/tools" && sha256sum helm/go.mod helm/go.sum kubeconform/go.mod kubeconform/go.sum)
}
WANT_STAMP="$(stamp)"

is_current() { has_all "$ASSETS" && [[ -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$WANT_STAMP" ]]; }

if is_current; then
    log "up to date: $ASSETS"
    printf '%s\n' "$ASSETS"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    die 2 "Go is not installed (no 'go' on PATH), so helm and kubeconform cannot be built.
Install Go >= 1.26 or set CHART_TOOLS_ASSETS to a folder holding those two binaries."
fi

GO_VERSION="$(go env GOVERSION 2>/dev/null || true)"
need_go="$(awk '$1 == "go" { print $2; exit }' "$HELM_MOD/go.mod")"
if [[ "$GO_VERSION" =~ ^go([0-9]+)\.([0-9]+) && "$(go env GOTOOLCHAIN)" == local* ]]; then
    have=$((BASH_REMATCH[1] * 1000 + BASH_REMATCH[2]))
    IFS=. read -r nmaj nmin _ <<<"$need_go"
    if ((have < nmaj * 1000 + nmin)); then
        die 2 "$GO_VERSION is too old: helm $HELM_VERSION needs go >= $need_go (unset GOTOOLCHAIN=local to let go fetch it)"
    fi
fi

mkdir -p "$CACHE_DIR/chart-tools"

# One build at a time per cache folder (parallel test sessions, pytest-xdist workers).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE_DIR/chart-tools/.lock"
    flock -n 9 || { log "another build is running, waiting for it" && flock 9; }
    if is_current; then
        log "up to date: $ASSETS"
        printf '%s\n' "$ASSETS"
        exit 0
    fi
fi

WORK="$(mktemp -d "$CACHE_DIR/chart-tools/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

export GOWORK=off CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"

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

mkdir -p "$ASSETS"
rm -f "$STAMP_FILE"
for b in "${BINARIES[@]}"; do
    mv -f "$WORK/$b" "$ASSETS/$b"
done
printf '%s\n' "$WANT_STAMP" >"$STAMP_FILE"
log "installed into $ASSETS"
printf '%s\n' "$ASSETS"
