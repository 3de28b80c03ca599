//go:build kube1.36

package reclaimpreemption

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
)

// newEvaluator is an Evaluator with this plugin as its Interface and
// DefaultPreemption's executor, which deletes victims.
func (pl *ReclaimPreemption) newEvaluator(dp *defaultpreemption.DefaultPreemption, h fwk.Handle, _ plfeature.Features) *preemption.Evaluator {
	preempt := dp.Executor.PreemptPod
	dp.Executor.PreemptPod = func(ctx context.Context, c preemption.Candidate, preemptor preemption.ExecutorPreemptor, victim *v1.Pod, pluginName string) error {
		return pl.capAfter(ctx, victim, func() error { return preempt(ctx, c, preemptor, victim, pluginName) })
	}
	return preemption.NewEvaluator(Name, h, pl, dp.Executor)
}
