#!/usr/bin/env bash
# Provides prometheus and promtool for the metrics e2e tests (dashboard panels, alert rules).
#
#   hack/build-prometheus.sh        # prints the folder holding both binaries on its last stdout line
#
# 1. If PROMETHEUS_ASSETS names a folder holding both binaries, it is used as is.
# 2. Otherwise they are built from the Go module pinned in hack/tools/prometheus into
#    ${CHAOSFLOW_CACHE_DIR:-$HOME/.cache/chaosflow}/prometheus/prometheus-<module version>/
#    and reused by later calls while the stamp there matches the pinned go.mod/go.sum.
#
# Built without the `builtinassets` tag: the web UI pages are not embedded (the HTTP API, which
# the tests use, works fully). Same conventions as hack/build-test-binaries.sh.
# Progress and build output go to stderr; stdout carries only the folder.
# Exit codes: 0 ok, 2 Go missing or too old, 1 build failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROM_MOD="$ROOT/hack/tools/prometheus"
BINARIES=(prometheus promtool)
# Bump when the build recipe below changes in a way that must invalidate cached binaries.
RECIPE=1

log() { printf 'build-prometheus: %s\n' "$*" >&2; }
die() {
    local code="$1"
    shift
    printf 'build-prometheus: error: %s\n' "$*" >&2
    exit "$code"
}

has_all() {
    local dir="$1" b
    for b in "${BINARIES[@]}"; do
        [[ -x "$dir/$b" && -f "$dir/$b" ]] || return 1
    done
}

if [[ -n "${PROMETHEUS_ASSETS:-}" ]]; then
    if has_all "$PROMETHEUS_ASSETS"; then
        log "using PROMETHEUS_ASSETS=$PROMETHEUS_ASSETS"
        printf '%s\n' "$PROMETHEUS_ASSETS"
        exit 0
    fi
    log "PROMETHEUS_ASSETS=$PROMETHEUS_ASSETS lacks one of: ${BINARIES[*]}; building them instead"
fi

mod_version() { # mod_version GO_MOD_FILE MODULE_PATH -> version required there
    awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}

PROM_MODULE_VERSION="$(mod_version "$PROM_MOD/go.mod" github.com/prometheus/prometheus)"
[[ -n "$PROM_MODULE_VERSION" ]] || die 1 "cannot read the pinned version from hack/tools/prometheus/go.mod"
# The Go module v0.3MM.P is Prometheus 3.MM.P.
if [[ "$PROM_MODULE_VERSION" =~ ^v0\.3([0-9][0-9])\.([0-9]+)$ ]]; then
    PROM_VERSION="3.$((10#${BASH_REMATCH[1]})).${BASH_REMATCH[2]}"
else
    PROM_VERSION="${PROM_MODULE_VERSION#v}"
fi

CACHE_DIR="${CHAOSFLOW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/chaosflow}"
ASSETS="$CACHE_DIR/prometheus/prometheus-$PROM_MODULE_VERSION"
STAMP_FILE="$ASSETS/.stamp"

# Everything that decides the binaries' content, except the Go toolchain.
stamp() {
    printf 'recipe=%s prometheus=%s os=%s arch=%s\n' "$RECIPE" "$PROM_MODULE_VERSION" "$(uname -s)" "$(uname -m)"
    (cd "$ROOT/hack/tools" && sha256sum prometheus/go.mod prometheus/go.sum)
}
WANT_STAMP="$(stamp)"

is_current() { has_all "$ASSETS" && [[ -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$WANT_STAMP" ]]; }

if is_current; then
    log "up to date: $ASSETS"
    printf '%s\n' "$ASSETS"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    die 2 "Go is not installed (no 'go' on PATH), so prometheus and promtool cannot be built.
Install Go >= 1.26 or set PROMETHEUS_ASSETS to a folder holding those two binaries."
fi

GO_VERSION="$(go env GOVERSION 2>/dev/null || true)"
need_go="$(awk '$1 == "go" { print $2; exit }' "$PROM_MOD/go.mod")"
if [[ "$GO_VERSION" =~ ^go([0-9]+)\.([0-9]+) && "$(go env GOTOOLCHAIN)" == local* ]]; then
    have=$((BASH_REMATCH[1] * 1000 + BASH_REMATCH[2]))
    IFS=. read -r nmaj nmin _ <<<"$need_go"
    if ((have < nmaj * 1000 + nmin)); then
        die 2 "$GO_VERSION is too old: prometheus $PROM_VERSION needs go >= $need_go (unset GOTOOLCHAIN=local to let go fetch it)"
    fi
fi

mkdir -p "$CACHE_DIR/prometheus"

# One build at a time per cache folder (parallel test sessions, pytest-xdist workers).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE_DIR/prometheus/.lock"
    flock -n 9 || { log "another build is running, waiting for it" && flock 9; }
    if is_current; then
        log "up to date: $ASSETS"
        printf '%s\n' "$ASSETS"
        exit 0
    fi
fi

WORK="$(mktemp -d "$CACHE_DIR/prometheus/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

export GOWORK=off CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"

ver_pkg=github.com/prometheus/common/version
ldflags="-s -w -X $ver_pkg.Version=$PROM_VERSION -X $ver_pkg.Branch=HEAD -X $ver_pkg.Revision=$PROM_MODULE_VERSION"
ldflags+=" -X $ver_pkg.BuildUser=chaosflow"

start=$SECONDS
log "building prometheus and promtool $PROM_VERSION ($PROM_MODULE_VERSION) with $GO_VERSION (cold: a few minutes)"
(cd "$PROM_MOD" && go build -trimpath -tags netgo -ldflags="$ldflags" -o "$WORK/" \
    github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool) >&2 ||
    die 1 "building prometheus/promtool failed (see the go output above)"
log "built after $((SECONDS - start))s"

"$WORK/prometheus" --version >/dev/null 2>&1 || die 1 "the built prometheus does not run"
"$WORK/promtool" --version >/dev/null 2>&1 || die 1 "the built promtool does not run"

mkdir -p "$ASSETS"
rm -f "$STAMP_FILE"
for b in "${BINARIES[@]}"; do
    mv -f "$WORK/$b" "$ASSETS/$b"
done
printf '%s\n' "$WANT_STAMP" >"$STAMP_FILE"
log "installed into $ASSETS"
printf '%s\n' "$ASSETS"
