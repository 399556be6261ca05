//go:build tools

// Package tools records the main packages built from this module so that `go mod tidy` keeps their
// dependencies. The build tag keeps it out of every real build.
package tools

import (
	_ "github.com/argoproj/argo-workflows/v3/cmd/argoexec"
	_ "github.com/argoproj/argo-workflows/v3/cmd/workflow-controller"
	_ "github.com/kubeflow/pipelines/backend/src/agent/persistence"
	_ "github.com/kubeflow/pipelines/backend/src/apiserver"
	_ "github.com/kubeflow/pipelines/backend/src/crd/controller/scheduledworkflow"
	_ "github.com/kubeflow/pipelines/backend/src/v2/cmd/driver"
	_ "github.com/kubeflow/pipelines/backend/src/v2/cmd/launcher-v2"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
