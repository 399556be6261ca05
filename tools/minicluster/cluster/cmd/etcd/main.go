// Command etcd runs etcd's own server entry point; it exists only so etcd can be built from the
// module proxy inside this tools module (etcd's release modules carry local replace directives).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
