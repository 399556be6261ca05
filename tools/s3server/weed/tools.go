//go:build tools

// Package tools records the main package built from this module so that `go mod tidy` keeps its
// dependencies. The build tag keeps it out of every real build.
package tools

import (
	_ "github.com/seaweedfs/seaweedfs/weed"
)
