// Command gleaner-scheduler is the stock kube-scheduler with Gleaner's plugins
// registered. Configure the gleaner-scheduler profile with --config (see
// charts/gleaner/templates/scheduler/config.yaml).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/gleaner-dev/gleaner/pkg/scheduler"
)

func main() {
	os.Exit(cli.Run(scheduler.NewCommand()))
}
