//go:build !kube1.35 && !kube1.36

package reclaimpreemption

// The glue between Gleaner's victim policy and upstream's preemption, whose
// API changes between Kubernetes minors: this file is for the newest. Those
// for older minors (hack/minors) are upstream_pre137.go and its kin.

import (
	"context"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
)

// wire hooks the policy into dp and builds the plugin's Evaluator.
func (pl *ReclaimPreemption) wire(dp *defaultpreemption.DefaultPreemption, h fwk.Handle, _ plfeature.Features) {
	// Upstream deletes a victim with its own grace period; delete it again with
	// the capped one (the API server only ever shortens a deletion's grace). A
	// victim preempted in memory (a pod waiting in Permit) is not deleted.
	preempt := dp.Executor.PreemptPod
	dp.Executor.PreemptPod = func(ctx context.Context, c preemption.Candidate, preemptor preemption.ExecutorPreemptor, victim *v1.Pod, pluginName string) (bool, error) {
		inMemory, err := preempt(ctx, c, preemptor, victim, pluginName)
		if err != nil || inMemory {
			return inMemory, err
		}
		return false, pl.capGrace(ctx, victim)
	}
	// DefaultPreemption's SelectVictimsOnNode consults these hooks.
	dp.IsEligiblePod = pl.isEligibleVictim
	dp.MoreImportantVictim = pl.moreImportantVictim
	// The Evaluator runs with this plugin as its Interface (SelectVictimsOnNode
	// is overridden) and DefaultPreemption's executor, which evicts the victims.
	pl.evaluator = preemption.NewEvaluator(Name, h, pl, dp.Executor)
}

// SelectVictimsOnNode is DefaultPreemption's choice, widened to whole gangs
// (withWholeGangs). Upstream's Evaluator makes a native gang one victim only
// when its PodGroup asks for disruptionMode All.
func (pl *ReclaimPreemption) SelectVictimsOnNode(ctx context.Context, state fwk.CycleState, preemptor *v1.Pod, nodeInfo fwk.NodeInfo,
	victims []*preemption.DomainVictim, pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	pods, violations, status := pl.DefaultPreemption.SelectVictimsOnNode(ctx, state, preemptor, nodeInfo, victims, pdbs)
	if !status.IsSuccess() {
		return pods, violations, status
	}
	return pl.withWholeGangs(pods), violations, status
}

// isEligibleVictim: only best-effort pods are ever taken, and a gang only as a whole.
func (pl *ReclaimPreemption) isEligibleVictim(_ fwk.NodeInfo, victim preemption.Victim, _ *v1.Pod) bool {
	return pl.eligible(victim.Pods())
}

// moreImportantVictim: the victim with more work to lose first (so the
// Evaluator reprieves it first), then upstream's order.
func (pl *ReclaimPreemption) moreImportantVictim(a, b preemption.Victim) bool {
	if more, decided := pl.moreWorkToLose(a.Pods(), b.Pods()); decided {
		return more
	}
	return preemption.MoreImportantVictim(a, b)
}
