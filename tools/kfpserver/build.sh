#!/usr/bin/env bash
# Build the KFP 2.14.3 backend from its Go module into a cache outside the repository: the API server
# (`backend/src/apiserver`), the persistence agent, the scheduled-workflow controller, the v2 driver
# and launcher, and the Argo Workflows v3.6.7 controller and executor KFP 2.14.3 builds against; and
# gather the CRDs they need.
#
# Why a tools module (./server): KFP's go.mod replaces its in-tree `api` and `kubernetes_platform`
# modules, which `go install pkg@version` refuses and an importer does not inherit. ./server/go.mod
# requires KFP at the 2.14.3 release commit and go.sum pins every dependency. The module proxy does
# not serve those two sub-modules at that commit (only older pseudo-versions that lack fields the
# server uses), so protogen.py regenerates their Go code -- they are pure protoc-gen-go output --
# from the 2.14.3 release's descriptors in its PyPI wheels (sha256-pinned below), and a generated
# go.work points the build at the result. KFP's module is not in the checksum database, hence
# GONOSUMDB for it (go.sum still pins its hash).
#
# Idempotent: the output directory is keyed by a hash of the pinned inputs; when the binaries and the
# CRDs are there the script prints the directory and exits at once.
#
# Usage: tools/kfpserver/build.sh [--print-dir]
#   prints progress and timings on stderr, and the output directory (bin/<binary>, crd/*.yaml: what
#   the API server writes, argo-crd/*.yaml: every Argo kind) as the last line of stdout.
# Needs: go, a C compiler (cgo, see below), python with protobuf + googleapis-common-protos, pip.
# Environment: CTR_VOLCANO_CACHE (default ~/.cache/ctr-volcano), PYTHON (default python3, needs the
# protobuf and googleapis-common-protos packages kfp depends on), GOFLAGS/GOMAXPROCS as usual.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
KFP_VERSION="2.14.3"
KFP_MODULE="github.com/kubeflow/pipelines"
# The wheels of the same release; their *_pb2.py files hold the compiled .proto descriptors.
WHEELS=(
  "kfp_pipeline_spec-2.14.3-py3-none-any.whl 47a0239ea8cb982679081f9e80c3dfa5e6dec013ea2dd8f467ad4e9b52f438b3"
  "kfp_kubernetes-2.14.3-py3-none-any.whl 5468ca98be248a922f4cfb764189a5a919135e2a30f2bc03f37f4a75bdca4e0c"
)
# Bump when the build recipe below changes in a way that changes the outputs.
RECIPE=2
PYTHON="${PYTHON:-python3}"

TOOL=kfpserver
# shellcheck source=../gobuild.sh
. "$HERE/../gobuild.sh"
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}$KFP_MODULE"
gobuild_go
gobuild_cache "$RECIPE $GO_VERSION $KFP_VERSION ${WHEELS[*]}" \
  "$HERE/server/go.mod" "$HERE/server/go.sum" "$HERE/protogen.py"
# The backend: the API server, the two controllers and the agent, and what runs in the pods.
BINARIES=(apiserver persistence scheduledworkflow driver launcher-v2 workflow-controller argoexec)
OUTPUTS=("${BINARIES[@]/#/bin/}" crd/workflows.argoproj.io.yaml crd/scheduledworkflows.kubeflow.org.yaml
  argo-crd/argoproj.io_workflowtaskresults.yaml)
have_all() {
  local f
  for f in "${OUTPUTS[@]}"; do [ -s "$ROOT/$f" ] || return 1; done
}
gobuild_begin "$ROOT" "KFP backend" "${1:-}"

cd "$HERE/server"
echo "kfpserver: KFP $KFP_VERSION, go $GO_VERSION, output $ROOT, GOMAXPROCS=${GOMAXPROCS:-$(nproc)}" >&2
gobuild_step "downloading modules" go mod download

# The two sub-modules: start from the proxy's older copies (their cachekey package, whose .proto is
# unchanged since, is reused as is) and regenerate the rest from the release's descriptors.
gobuild_step "downloading the $KFP_VERSION wheels" "$PYTHON" -m pip download --quiet --no-deps \
  --only-binary=:all: --dest "$STAGE/wheels" "kfp-pipeline-spec==$KFP_VERSION" "kfp-kubernetes==$KFP_VERSION"
for w in "${WHEELS[@]}"; do
  read -r file sum <<<"$w"
  echo "$sum  $STAGE/wheels/$file" | sha256sum --check --quiet - >&2
done
gobuild_step "building protoc-gen-go" go build -o "$STAGE/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
SRC="$ROOT/src"
rm -rf "$SRC"
mkdir -p "$SRC"
for sub in api kubernetes_platform; do
  cp -r "$(go list -m -f '{{.Dir}}' "$KFP_MODULE/$sub")" "$SRC/$sub"
  chmod -R u+w "$SRC/$sub"
  rm -f "$SRC/$sub/go.sum"
done
gobuild_step "regenerating the api and kubernetes_platform Go code" "$PYTHON" "$HERE/protogen.py" \
  --protoc-gen-go "$STAGE/protoc-gen-go" --out "$STAGE/gen" "$STAGE"/wheels/*.whl
cp "$STAGE/gen/$KFP_MODULE/api/v2alpha1/go/pipelinespec/pipeline_spec.pb.go" \
  "$SRC/api/v2alpha1/go/pipelinespec/pipeline_spec.pb.go"
cp "$STAGE/gen/$KFP_MODULE/kubernetes_platform/go/kubernetesplatform/kubernetes_executor_config.pb.go" \
  "$SRC/kubernetes_platform/go/kubernetesplatform/kubernetes_executor_config.pb.go"
mod_version() { go list -m -f '{{.Version}}' "$1"; }
RPC_VERSION="$(mod_version google.golang.org/genproto/googleapis/rpc)"
PB_VERSION="$(mod_version google.golang.org/protobuf)"
printf 'module %s/api\n\ngo 1.23\n\nrequire (\n\tgoogle.golang.org/genproto/googleapis/rpc %s\n\tgoogle.golang.org/protobuf %s\n)\n' \
  "$KFP_MODULE" "$RPC_VERSION" "$PB_VERSION" > "$SRC/api/go.mod"
printf 'module %s/kubernetes_platform\n\ngo 1.23\n\nrequire (\n\t%s/api %s\n\tgoogle.golang.org/protobuf %s\n)\n' \
  "$KFP_MODULE" "$KFP_MODULE" "$(mod_version "$KFP_MODULE/api")" "$PB_VERSION" > "$SRC/kubernetes_platform/go.mod"
# Argo: in its repository os-specific/signal_linux.go is a symbolic link to signal_darwin.go (the
# same code serves both), and module zips leave symbolic links out, so the module as served does not
# build on Linux. Copy the module out of the cache and put the link's target at the link's name.
ARGO_MODULE="github.com/argoproj/argo-workflows/v3"
ARGO_SRC="$(go list -m -f '{{.Dir}}' "$ARGO_MODULE")"
cp -r "$ARGO_SRC" "$SRC/argo-workflows"
chmod -R u+w "$SRC/argo-workflows"
OS_SPECIFIC="$SRC/argo-workflows/workflow/executor/os-specific"
[ ! -e "$OS_SPECIFIC/signal_linux.go" ] && cp "$OS_SPECIFIC/signal_darwin.go" "$OS_SPECIFIC/signal_linux.go"
printf 'go 1.25.0\n\nuse %s\n\nreplace (\n\t%s/api => %s\n\t%s/kubernetes_platform => %s\n\t%s => %s\n)\n' \
  "$HERE/server" "$KFP_MODULE" "$SRC/api" "$KFP_MODULE" "$SRC/kubernetes_platform" \
  "$ARGO_MODULE" "$SRC/argo-workflows" > "$STAGE/go.work"

# One `go build` for the seven binaries: they share most packages (client-go, Argo's workflow
# packages, KFP's own), so each is compiled once. cgo on, as upstream builds the API server: its
# storage layer uses go-sqlite3's error types, which exist only in its cgo build (KFP's image builds
# with the Go image's default, CGO_ENABLED=1); the others do not mind. Argo's version stamp is what
# its Makefile sets (the controller logs it, the executor reports it).
ARGO_VERSION="$(mod_version "$ARGO_MODULE")"
gobuild_step "building apiserver, persistence agent, scheduledworkflow, driver, launcher-v2, workflow-controller, argoexec" \
  env GOWORK="$STAGE/go.work" CGO_ENABLED=1 go build \
  -ldflags "-s -w -X github.com/argoproj/argo-workflows/v3.version=$ARGO_VERSION" -o "$STAGE/bin/" \
  "$KFP_MODULE/backend/src/apiserver" "$KFP_MODULE/backend/src/agent/persistence" \
  "$KFP_MODULE/backend/src/crd/controller/scheduledworkflow" \
  "$KFP_MODULE/backend/src/v2/cmd/driver" "$KFP_MODULE/backend/src/v2/cmd/launcher-v2" \
  "$ARGO_MODULE/cmd/workflow-controller" "$ARGO_MODULE/cmd/argoexec"

# The CRDs the server writes: Argo's Workflow (from the argo-workflows module KFP builds against; the
# "minimal" schema Argo's and KFP's installs use -- the "full" one is 2.8 MB, over etcd's request
# limit) and KFP's ScheduledWorkflow (from KFP's own manifests).
mkdir -p "$STAGE/crd"
ARGO_DIR="$ARGO_SRC"
KFP_DIR="$(go list -m -f '{{.Dir}}' "$KFP_MODULE")"
cp "$ARGO_DIR/manifests/base/crds/minimal/argoproj.io_workflows.yaml" "$STAGE/crd/workflows.argoproj.io.yaml"
cp "$KFP_DIR/manifests/kustomize/base/pipeline/cluster-scoped/scheduled-workflow-crd.yaml" \
  "$STAGE/crd/scheduledworkflows.kubeflow.org.yaml"

# Argo's controller watches more of its kinds than the API server writes (task results, templates,
# ...): the whole minimal set, applied with the backend.
mkdir -p "$STAGE/argo-crd"
cp "$ARGO_DIR"/manifests/base/crds/minimal/argoproj.io_*.yaml "$STAGE/argo-crd/"

mkdir -p "$ROOT/bin" "$ROOT/crd" "$ROOT/argo-crd"
mv -f "$STAGE/crd/"*.yaml "$ROOT/crd/"
mv -f "$STAGE/argo-crd/"*.yaml "$ROOT/argo-crd/"
for b in "${BINARIES[@]}"; do mv -f "$STAGE/bin/$b" "$ROOT/bin/$b"; done
echo "kfpserver: built in $(( $(date +%s) - T0 ))s -> $ROOT" >&2
echo "$ROOT"
