// Package scheduler registers Gleaner's plugins with the stock kube-scheduler, so
// the gleaner-scheduler binary and in-process tests build the same scheduler.
package scheduler

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	k8sversion "k8s.io/component-base/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gleaner-dev/gleaner/internal/memlimit"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gang"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gpuharvest"
	"github.com/gleaner-dev/gleaner/pkg/plugins/reclaimpreemption"
	"github.com/gleaner-dev/gleaner/pkg/version"
)

// Plugins are the options that add Gleaner's plugins to the scheduler's registry.
func Plugins() []app.Option {
	return []app.Option{
		app.WithPlugin(gpuharvest.Name, gpuharvest.New),
		app.WithPlugin(reclaimpreemption.Name, reclaimpreemption.New),
		app.WithPlugin(gang.Name, gang.New),
	}
}

// NewCommand is gleaner-scheduler's command: kube-scheduler's, with Gleaner's
// plugins registered, its own name in usage and help, and a --version that
// names Gleaner's release and commit as well as the Kubernetes it is built on.
func NewCommand() *cobra.Command {
	cmd := app.NewSchedulerCommand(Plugins()...)
	cmd.Use = "gleaner-scheduler"
	cmd.Short = "kube-scheduler with Gleaner's plugins"
	cmd.Long = `gleaner-scheduler is the stock kube-scheduler with Gleaner's plugins registered:
GPUHarvest (best-effort pods only on GPUs gleaner-controller lends), ReclaimPreemption
(inference takes lent GPUs back, least lost work first) and Gang (PodGroups all
or nothing). It runs beside the default scheduler; pods choose it with
schedulerName: gleaner-scheduler. Its profile and plugin args are read from
--config (docs/reference/scheduler-plugins.md). Every other flag is kube-scheduler's.`
	if help := cmd.Flags().Lookup("help"); help != nil {
		help.Usage = "help for gleaner-scheduler"
	}
	pre := cmd.PersistentPreRunE
	cmd.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		// Before kube-scheduler's own --version, which names only Kubernetes.
		if v := c.Flags().Lookup("version"); v != nil && v.Changed && v.Value.String() != "false" {
			fmt.Fprintf(c.OutOrStdout(), "%s\nkube-scheduler %s\n", version.String(), k8sversion.Get().GitVersion)
			os.Exit(0)
		}
		memlimit.Set()
		if pre != nil {
			return pre(c, args)
		}
		return nil
	}
	return cmd
}
