// Package scheduler registers Gleaner's plugins with the stock kube-scheduler, so
// the gleaner-scheduler binary and in-process tests build the same scheduler.
package scheduler

import (
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gleaner-dev/gleaner/pkg/plugins/gang"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gpuharvest"
	"github.com/gleaner-dev/gleaner/pkg/plugins/reclaimpreemption"
)

// Plugins are the options that add Gleaner's plugins to the scheduler's registry.
func Plugins() []app.Option {
	return []app.Option{
		app.WithPlugin(gpuharvest.Name, gpuharvest.New),
		app.WithPlugin(reclaimpreemption.Name, reclaimpreemption.New),
		app.WithPlugin(gang.Name, gang.New),
	}
}
