//go:build tools

// Package tools records the main packages built from this module so that `go mod tidy` keeps their
// dependencies. The build tag keeps it out of every real build.
package tools

import (
	_ "github.com/kubeflow/pipelines/backend/src/apiserver"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
