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

SCRIPT=build-prometheus
BINARIES=(prometheus promtool)
# Bump when the build recipe below changes in a way that must invalidate cached binaries.
RECIPE=1
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PROM_MOD="$ROOT/hack/tools/prometheus"

use_assets_from_env PROMETHEUS_ASSETS

PROM_MODULE_VERSION="$(mod_version "$PROM_MOD/go.mod" github.com/prometheus/prometheus)"
[[ -n "$PROM_MODULE_VERSION" ]] || die 1 "cannot read the pinned version from hack/tools/prometheus/go.mod"
# The Go module v0.3MM.P is Prometheus 3.MM.P.
if [[ "$PROM_MODULE_VERSION" =~ ^v0\.3([0-9][0-9])\.([0-9]+)$ ]]; then
    PROM_VERSION="3.$((10#${BASH_REMATCH[1]})).${BASH_REMATCH[2]}"
else
    PROM_VERSION="${PROM_MODULE_VERSION#v}"
fi

# Everything that decides the binaries' content, except the Go toolchain.
setup_cache prometheus "prometheus-$PROM_MODULE_VERSION" "$(
    printf 'recipe=%s prometheus=%s os=%s arch=%s\n' "$RECIPE" "$PROM_MODULE_VERSION" "$(uname -s)" "$(uname -m)"
    cd "$ROOT/hack/tools" && sha256sum prometheus/go.mod prometheus/go.sum
)"

require_go "$PROM_MOD/go.mod" "prometheus and promtool $PROM_VERSION" \
    "Install Go >= 1.26 or set PROMETHEUS_ASSETS to a folder holding those two binaries."
lock_build

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

install_binaries
