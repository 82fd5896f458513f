// Command sample-apiserver is an aggregated apiserver for the
// demo.watchkeeper.io group whose watch cache is watchkeeper. With no
// flags it runs standalone on an embedded etcd.
package main

import (
	"os"

	"k8s.io/apiserver/pkg/server/signals"
	"k8s.io/component-base/cli"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/server"
)

func main() {
	ctx := signals.SetupSignalContext()
	os.Exit(cli.Run(server.NewCommand(ctx, os.Stdout)))
}
