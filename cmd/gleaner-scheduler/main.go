// Command gleaner-scheduler is the stock kube-scheduler with Gleaner's plugins
// registered. Configure the gleaner-scheduler profile with --config (see
// manifests/scheduler).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gleaner-dev/gleaner/pkg/scheduler"
)

func main() {
	cmd := app.NewSchedulerCommand(scheduler.Plugins()...)
	os.Exit(cli.Run(cmd))
}
