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

TOOL=minicluster
# shellcheck source=../gobuild.sh
. "$HERE/../gobuild.sh"
gobuild_go
gobuild_cache "$RECIPE $GO_VERSION $KWOK_VERSION $K8S_VERSION ${BINARIES[*]}" \
  "$HERE/cluster/go.mod" "$HERE/cluster/go.sum" "$HERE/cluster/cmd/etcd/main.go" \
  "$HERE"/cluster/overlay/*.go.txt
BIN="$ROOT/bin"
have_all() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}
gobuild_begin "$BIN" binaries "${1:-}"

MINOR="${K8S_VERSION#v1.}"; MINOR="${MINOR%%.*}"
K8S_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"

cd "$HERE/cluster"
echo "minicluster: go $GO_VERSION, output $BIN, GOMAXPROCS=${GOMAXPROCS:-$(nproc)}" >&2
gobuild_step "downloading modules" go mod download

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
gobuild_step "building etcd, kube-apiserver, kube-controller-manager, kube-scheduler, vc-scheduler, vc-controller-manager, vc-webhook-manager" \
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
gobuild_step "building kwok" env GOBIN="$STAGE" GOFLAGS="-trimpath" go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

mkdir -p "$BIN"
for b in "${BINARIES[@]}"; do mv -f "$STAGE/$b" "$BIN/$b"; done
echo "minicluster: all binaries built in $(( $(date +%s) - T0 ))s -> $BIN" >&2
echo "$BIN"
