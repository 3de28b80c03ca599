//go:build kube1.35

package reclaimpreemption

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
)

// newEvaluator is an Evaluator with this plugin as its Interface. In 1.35 the
// Evaluator itself deletes victims and tracks asynchronous preemptions; it
// replaces DefaultPreemption's, whose PreEnqueue asks it which pods are still
// preempting.
func (pl *ReclaimPreemption) newEvaluator(dp *defaultpreemption.DefaultPreemption, h fwk.Handle, fts plfeature.Features) *preemption.Evaluator {
	ev := preemption.NewEvaluator(Name, h, pl, fts.EnableAsyncPreemption)
	preempt := ev.PreemptPod
	ev.PreemptPod = func(ctx context.Context, c preemption.Candidate, preemptor, victim *v1.Pod, pluginName string) error {
		return pl.capAfter(ctx, victim, func() error { return preempt(ctx, c, preemptor, victim, pluginName) })
	}
	dp.Evaluator = ev
	return ev
}
