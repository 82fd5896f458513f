// Command kube-apiserver is kube-apiserver v1.38.0-beta.0 with watchkeeper as the
// watch cache of every resource it caches (package kubeapiserver); `make`
// builds it into bin/kube-apiserver-watchkeeper.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob, as upstream's main

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics, as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as upstream's main

	"github.com/watchkeeper/watchkeeper/e2e/kubeapiserver"
)

func main() {
	os.Exit(cli.Run(kubeapiserver.NewCommand()))
}
