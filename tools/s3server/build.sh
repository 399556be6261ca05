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

TOOL=s3server
# shellcheck source=../gobuild.sh
. "$HERE/../gobuild.sh"
gobuild_go -mod=readonly
gobuild_cache "$RECIPE $GO_VERSION" "$HERE/weed/go.mod" "$HERE/weed/go.sum"
BIN="$ROOT/bin"
have_all() { [ -x "$BIN/weed" ]; }
gobuild_begin "$BIN" weed "${1:-}"

echo "s3server: go $GO_VERSION, output $BIN, GOMAXPROCS=${GOMAXPROCS:-$(nproc)}" >&2
cd "$HERE/weed"
gobuild_step "building weed" go build -ldflags "-s -w" -o "$STAGE/weed" github.com/seaweedfs/seaweedfs/weed
mkdir -p "$BIN"
mv -f "$STAGE/weed" "$BIN/weed"
echo "s3server: weed built in $(( $(date +%s) - T0 ))s -> $BIN" >&2
echo "$BIN"
