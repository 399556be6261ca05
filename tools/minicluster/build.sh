#!/usr/bin/env bash
# Build the cluster test tier's binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# vc-scheduler, vc-controller-manager, vc-webhook-manager, kwok) from the Go module proxy with the
# ordinary `go` tool, into a cache outside the repository.
#
# Why a script: Kubernetes, etcd and Volcano cannot be `go install`ed (their go.mod files carry local
# replace directives), so they are built from the tools module in ./cluster, whose go.mod/go.sum pin
# every version. kwok has no replaces and is `go install`ed at a pinned version.
#
# Idempotent: the output directory is keyed by a hash of the pinned inputs; when every binary is
# already there the script prints the directory and exits at once.
#
# Usage: tools/minicluster/build.sh [--print-dir]
#   prints progress and timings on stderr, and the bin directory as the last line of stdout.
# Environment: CTR_VOLCANO_CACHE (default ~/.cache/ctr-volcano), GOFLAGS/GOMAXPROCS as usual.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
KWOK_VERSION="v0.8.0"
K8S_VERSION="v1.35.3"
BINARIES=(etcd kube-apiserver kube-controller-manager vc-scheduler vc-controller-manager kwok
  kube-scheduler vc-webhook-manager)
# Bump when the build recipe below changes in a way that changes the binaries.
RECIPE=3

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -trimpath"

if ! command -v go >/dev/null 2>&1; then
  echo "minicluster: the 'go' tool is not installed" >&2
  exit 3
fi

GO_VERSION="$(go env GOVERSION)"
KEY="$( { echo "$RECIPE $GO_VERSION $KWOK_VERSION $K8S_VERSION ${BINARIES[*]}"
  cat "$HERE/cluster/go.mod" "$HERE/cluster/go.sum" "$HERE/cluster/cmd/etcd/main.go" \
    "$HERE"/cluster/overlay/*.go.txt; } | sha256sum | cut -c1-16)"
ROOT="${CTR_VOLCANO_CACHE:-$HOME/.cache/ctr-volcano}/minicluster/$KEY"
BIN="$ROOT/bin"

if [ "${1:-}" = "--print-dir" ]; then
  echo "$BIN"
  exit 0
fi

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}

if have_all; then
  echo "minicluster: binaries present in $BIN (skipping build)" >&2
  echo "$BIN"
  exit 0
fi

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9
if have_all; then
  echo "minicluster: binaries present in $BIN (built by another process)" >&2
  echo "$BIN"
  exit 0
fi

STAGE="$ROOT/stage.$$"
rm -rf "$STAGE"
mkdir -p "$STAGE"
trap 'rm -rf "$STAGE"' EXIT

T0=$(date +%s)
step() {  # step NAME COMMAND...
  local name="$1" t
  shift
  t=$(date +%s)
  echo "minicluster: [$(( t - T0 ))s] building $name ..." >&2
  # A heartbeat, so a long cold build visibly progresses in CI logs.
  ( trap 'kill $! 2>/dev/null; exit 0' TERM
    while :; do sleep 60 & wait $!; echo "minicluster: [$(( $(date +%s) - T0 ))s] ... still building $name" >&2; done
  ) 9>&- &
  local beat=$!
  "$@" >&2 || { kill "$beat" 2>/dev/null; return 1; }
  kill "$beat" 2>/dev/null
  echo "minicluster: [$(( $(date +%s) - T0 ))s] $name done in $(( $(date +%s) - t ))s" >&2
}

MINOR="${K8S_VERSION#v1.}"; MINOR="${MINOR%%.*}"
K8S_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"

cd "$HERE/cluster"
echo "minicluster: go $GO_VERSION, output $BIN, GOMAXPROCS=${GOMAXPROCS:-$(nproc)}" >&2
step "module download" go mod download

# volcano.sh/apis: the proxy serves it only up to v1.14.0, which lacks one constant that Volcano
# v1.15.1 uses. Copy that module out of the module cache, add the constant (our own files in
# cluster/overlay/), and point a generated go.work at the copy; nothing is committed or patched
# in place.
APIS_SRC="$(go list -m -f '{{.Dir}}' volcano.sh/apis)"
APIS_DIR="$ROOT/src/volcano.sh-apis"
rm -rf "$APIS_DIR"
mkdir -p "$ROOT/src"
cp -r "$APIS_SRC" "$APIS_DIR"
chmod -R u+w "$APIS_DIR"
cp "$HERE/cluster/overlay/scheduling_gate.go.txt" "$APIS_DIR/pkg/apis/scheduling/zz_ctr_volcano_gate.go"
cp "$HERE/cluster/overlay/scheduling_v1beta1_gate.go.txt" \
  "$APIS_DIR/pkg/apis/scheduling/v1beta1/zz_ctr_volcano_gate.go"
printf 'go 1.25.0\n\nuse %s\n\nreplace volcano.sh/apis => %s\n' "$HERE/cluster" "$APIS_DIR" > "$STAGE/go.work"
export GOWORK="$STAGE/go.work"

# One `go build` for all five: they share most packages (client-go, apiserver, ...), and the go tool
# keeps both cores busy across compile and link steps.
step "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, vc-scheduler, vc-controller-manager, vc-webhook-manager" \
  go build -ldflags "$K8S_LDFLAGS" -o "$STAGE/" ./cmd/etcd \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  volcano.sh/volcano/cmd/scheduler volcano.sh/volcano/cmd/controller-manager \
  volcano.sh/volcano/cmd/webhook-manager
mv "$STAGE/scheduler" "$STAGE/vc-scheduler"
mv "$STAGE/controller-manager" "$STAGE/vc-controller-manager"
mv "$STAGE/webhook-manager" "$STAGE/vc-webhook-manager"
cd "$HERE"
unset GOWORK
step "kwok" env GOBIN="$STAGE" GOFLAGS="-trimpath" go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

mkdir -p "$BIN"
for b in "${BINARIES[@]}"; do mv -f "$STAGE/$b" "$BIN/$b"; done
echo "minicluster: all binaries built in $(( $(date +%s) - T0 ))s -> $BIN" >&2
echo "$BIN"
