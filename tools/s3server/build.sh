#!/usr/bin/env bash
# Build SeaweedFS's `weed` (the S3 server of the object-store tests; KFP's own bundled object
# store) from its Go module with the ordinary `go` tool, into a cache outside the repository.
#
# Why a tools module (./weed) and not `go install`: SeaweedFS's go.mod carries a replace directive,
# which `go install pkg@version` refuses; ./weed/go.mod repeats it and go.sum pins every dependency.
#
# Idempotent: the output directory is keyed by a hash of the pinned inputs; when the binary is
# already there the script prints the directory and exits at once.
#
# Usage: tools/s3server/build.sh [--print-dir]
#   prints progress on stderr, and the bin directory as the last line of stdout.
# Environment: CTR_VOLCANO_CACHE (default ~/.cache/ctr-volcano), GOFLAGS/GOMAXPROCS as usual.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
# Bump when the build recipe below changes in a way that changes the binary.
RECIPE=1

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -trimpath -mod=readonly"

if ! command -v go >/dev/null 2>&1; then
  echo "s3server: the 'go' tool is not installed" >&2
  exit 3
fi

GO_VERSION="$(go env GOVERSION)"
KEY="$( { echo "$RECIPE $GO_VERSION"; cat "$HERE/weed/go.mod" "$HERE/weed/go.sum"; } \
  | sha256sum | cut -c1-16)"
ROOT="${CTR_VOLCANO_CACHE:-$HOME/.cache/ctr-volcano}/s3server/$KEY"
BIN="$ROOT/bin"

if [ "${1:-}" = "--print-dir" ]; then
  echo "$BIN"
  exit 0
fi
if [ -x "$BIN/weed" ]; then
  echo "s3server: weed present in $BIN (skipping build)" >&2
  echo "$BIN"
  exit 0
fi

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9
if [ -x "$BIN/weed" ]; then
  echo "s3server: weed present in $BIN (built by another process)" >&2
  echo "$BIN"
  exit 0
fi

STAGE="$ROOT/stage.$$"
rm -rf "$STAGE"
mkdir -p "$STAGE"
trap 'rm -rf "$STAGE"' EXIT

T0=$(date +%s)
echo "s3server: go $GO_VERSION, output $BIN, GOMAXPROCS=${GOMAXPROCS:-$(nproc)}" >&2
cd "$HERE/weed"
# A heartbeat, so a long cold build visibly progresses in CI logs.
( trap 'kill $! 2>/dev/null; exit 0' TERM
  while :; do sleep 60 & wait $!; echo "s3server: [$(( $(date +%s) - T0 ))s] ... still building weed" >&2; done
) 9>&- &
BEAT=$!
if ! go build -ldflags "-s -w" -o "$STAGE/weed" github.com/seaweedfs/seaweedfs/weed >&2; then
  kill "$BEAT" 2>/dev/null
  exit 1
fi
kill "$BEAT" 2>/dev/null
mkdir -p "$BIN"
mv -f "$STAGE/weed" "$BIN/weed"
echo "s3server: weed built in $(( $(date +%s) - T0 ))s -> $BIN" >&2
echo "$BIN"
