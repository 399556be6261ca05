# shellcheck shell=bash
# The build machinery the Go-built test servers share, sourced by tools/s3server/build.sh,
# tools/kfpserver/build.sh and tools/minicluster/build.sh (each keeps its own pins, cache-key inputs
# and build commands):
#
#   gobuild_go [GOFLAG...]       the Go environment (local toolchain, no cgo, reproducible flags plus
#                                GOFLAGs), exit 3 when `go` is missing; sets GO_VERSION
#   gobuild_cache LINE FILE...   KEY: 16 hex digits of sha256(LINE, then the FILEs' bytes);
#                                ROOT: the cache directory for that key
#   gobuild_begin OUT WHAT ARG   print OUT and exit at once when ARG is --print-dir or when the
#                                outputs are there (have_all); else take the cache directory's lock
#                                (a second build waits, then finds the outputs), make STAGE (removed
#                                on exit) and start the clock T0
#   gobuild_step NAME CMD...     run CMD (output on stderr) with timings and a heartbeat
#
# The sourcing script sets TOOL (its log prefix and cache folder) and defines `have_all` (true when
# every output is in place). Progress goes to stderr; the output directory is the last stdout line.

gobuild_go() {
  export GOTOOLCHAIN=local CGO_ENABLED=0
  export GOFLAGS="${GOFLAGS:-} -buildvcs=false -trimpath${*:+ $*}"
  if ! command -v go >/dev/null 2>&1; then
    echo "$TOOL: the 'go' tool is not installed" >&2
    exit 3
  fi
  GO_VERSION="$(go env GOVERSION)"
}

gobuild_cache() {
  local line="$1"
  shift
  KEY="$( { echo "$line"; cat "$@"; } | sha256sum | cut -c1-16)"
  ROOT="${CTR_VOLCANO_CACHE:-$HOME/.cache/ctr-volcano}/$TOOL/$KEY"
}

gobuild_begin() {
  local out="$1" what="$2"
  if [ "${3:-}" = "--print-dir" ]; then
    echo "$out"
    exit 0
  fi
  if have_all; then
    echo "$TOOL: $what present in $out (skipping build)" >&2
    echo "$out"
    exit 0
  fi
  mkdir -p "$ROOT"
  exec 9>"$ROOT/.lock"
  flock 9
  if have_all; then
    echo "$TOOL: $what present in $out (built by another process)" >&2
    echo "$out"
    exit 0
  fi
  STAGE="$ROOT/stage.$$"
  rm -rf "$STAGE"
  mkdir -p "$STAGE"
  trap 'rm -rf "$STAGE"' EXIT
  T0=$(date +%s)
}

gobuild_step() {
  local name="$1" t beat
  shift
  t=$(date +%s)
  echo "$TOOL: [$(( t - T0 ))s] $name ..." >&2
  # A heartbeat, so a long cold build visibly progresses in CI logs (fd 9, the lock, stays with us).
  ( trap 'kill $! 2>/dev/null; exit 0' TERM
    while :; do sleep 60 & wait $!; echo "$TOOL: [$(( $(date +%s) - T0 ))s] ... still $name" >&2; done
  ) 9>&- &
  beat=$!
  "$@" >&2 || { kill "$beat" 2>/dev/null; return 1; }
  kill "$beat" 2>/dev/null
  echo "$TOOL: [$(( $(date +%s) - T0 ))s] $name done in $(( $(date +%s) - t ))s" >&2
}
