// Package plugintest holds what the tests of Gleaner's scheduler plugins share
// to build a profile through the real scheduler framework: the upstream plugins
// every profile needs, and plugin args set as a configuration file sets them.
package plugintest

import (
	"k8s.io/apimachinery/pkg/runtime"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
)

// WithArgs sets a plugin's args in the profile's pluginConfig.
func WithArgs(name string, args runtime.Object) tf.RegisterPluginFunc {
	return func(_ *frameworkruntime.Registry, profile *schedulerapi.KubeSchedulerProfile) {
		for i := range profile.PluginConfig {
			if profile.PluginConfig[i].Name == name {
				profile.PluginConfig[i].Args = args
				return
			}
		}
		profile.PluginConfig = append(profile.PluginConfig, schedulerapi.PluginConfig{Name: name, Args: args})
	}
}

// RawArgs are JSON args, as a KubeSchedulerConfiguration file hands them over.
func RawArgs(raw string) runtime.Object {
	return &runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON}
}

// Upstream registers PrioritySort, DefaultBinder and NodeResourcesFit (at
// PreFilter and Filter), the upstream plugins Gleaner's plugins run beside.
func Upstream() []tf.RegisterPluginFunc {
	fitArgs := &schedulerapi.NodeResourcesFitArgs{ScoringStrategy: &schedulerapi.ScoringStrategy{
		Type:      schedulerapi.LeastAllocated,
		Resources: []schedulerapi.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}},
	}}
	return []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		tf.RegisterPluginAsExtensions(noderesources.Name, frameworkruntime.FactoryAdapter(feature.Features{}, noderesources.NewFit), "PreFilter", "Filter"),
		WithArgs(noderesources.Name, fitArgs),
	}
}
