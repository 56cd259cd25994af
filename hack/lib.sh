# shellcheck shell=bash
# Shared by hack/build-*.sh: tools built from Go modules pinned under hack/tools/, cached in
# ${CHAOSFLOW_CACHE_DIR:-$HOME/.cache/chaosflow}/<folder>/ and reused while a stamp matches.
#
# The sourcing script sets SCRIPT (log prefix) and BINARIES, then:
#   use_assets_from_env VAR        # exit 0 printing $VAR when it names a folder with all BINARIES
#   setup_cache SUBDIR FOLDER STAMP  # ASSETS, STAMP_FILE, WANT_STAMP; exit 0 when already built
#   require_go GO_MOD WHAT HINT    # exit 2 when Go is missing or older than GO_MOD's go line
#   lock_build                     # one build per cache folder; WORK = a temp dir removed on exit
#   install_binaries               # move BINARIES from WORK into ASSETS, write the stamp, print it
# Progress goes to stderr; stdout carries only the folder. Exit codes: 0 ok, 2 Go missing or too
# old, 1 build failure.

# shellcheck disable=SC2034  # ROOT is used by the sourcing scripts
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${CHAOSFLOW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/chaosflow}"
# A go.work above this repo, GOFLAGS=-mod=vendor or cgo must not change what gets built.
export GOWORK=off CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"

log() { printf '%s: %s\n' "$SCRIPT" "$*" >&2; }

die() {
    local code="$1"
    shift
    printf '%s: error: %s\n' "$SCRIPT" "$*" >&2
    exit "$code"
}

has_all() {
    local dir="$1" b
    for b in "${BINARIES[@]}"; do
        [[ -x "$dir/$b" && -f "$dir/$b" ]] || return 1
    done
}

use_assets_from_env() {
    local var="$1"
    local dir="${!var:-}"
    [[ -n "$dir" ]] || return 0
    if has_all "$dir"; then
        log "using $var=$dir"
        printf '%s\n' "$dir"
        exit 0
    fi
    log "$var=$dir lacks one of: ${BINARIES[*]}; building them instead"
}

mod_version() { # mod_version GO_MOD_FILE MODULE_PATH -> version required there
    awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}

is_current() { has_all "$ASSETS" && [[ -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$WANT_STAMP" ]]; }

exit_if_current() {
    if is_current; then
        log "up to date: $ASSETS"
        printf '%s\n' "$ASSETS"
        exit 0
    fi
}

setup_cache() { # setup_cache SUBDIR FOLDER STAMP
    CACHE_SUBDIR="$CACHE_DIR/$1"
    ASSETS="$CACHE_SUBDIR/$2"
    STAMP_FILE="$ASSETS/.stamp"
    WANT_STAMP="$3"
    exit_if_current
}

require_go() { # require_go GO_MOD WHAT HINT
    if ! command -v go >/dev/null 2>&1; then
        die 2 "Go is not installed (no 'go' on PATH), so $2 cannot be built.
$3"
    fi
    GO_VERSION="$(go env GOVERSION 2>/dev/null || true)"
    local need_go have nmaj nmin
    need_go="$(awk '$1 == "go" { print $2; exit }' "$1")"
    if [[ "$GO_VERSION" =~ ^go([0-9]+)\.([0-9]+) && "$(go env GOTOOLCHAIN)" == local* ]]; then
        have=$((BASH_REMATCH[1] * 1000 + BASH_REMATCH[2]))
        IFS=. read -r nmaj nmin _ <<<"$need_go"
        if ((have < nmaj * 1000 + nmin)); then
            die 2 "$GO_VERSION is too old: $2 needs go >= $need_go (unset GOTOOLCHAIN=local to let go fetch it)"
        fi
    fi
}

lock_build() {
    mkdir -p "$CACHE_SUBDIR"
    # One build at a time per cache folder (parallel test sessions, pytest-xdist workers).
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$CACHE_SUBDIR/.lock"
        flock -n 9 || { log "another build is running, waiting for it" && flock 9; }
        exit_if_current # another process built it while we waited
    fi
    WORK="$(mktemp -d "$CACHE_SUBDIR/.build.XXXXXX")"
    # shellcheck disable=SC2064  # expand now: WORK is fixed
    trap "rm -rf '$WORK'" EXIT
}

install_binaries() {
    mkdir -p "$ASSETS"
    rm -f "$STAMP_FILE"
    local b
    for b in "${BINARIES[@]}"; do
        mv -f "$WORK/$b" "$ASSETS/$b"
    done
    printf '%s\n' "$WANT_STAMP" >"$STAMP_FILE"
    log "installed into $ASSETS"
    printf '%s\n' "$ASSETS"
}
