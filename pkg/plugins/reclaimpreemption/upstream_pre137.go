//go:build kube1.35 || kube1.36

package reclaimpreemption

// The glue for Kubernetes 1.35 and 1.36 (hack/minors), where upstream's
// preemption hooks take one pod at a time. upstream.go is the newest minor's.

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// wire hooks the policy into dp and builds the plugin's Evaluator
// (newEvaluator, which differs between the two minors).
func (pl *ReclaimPreemption) wire(dp *defaultpreemption.DefaultPreemption, h fwk.Handle, fts plfeature.Features) {
	dp.IsEligiblePod = func(_ fwk.NodeInfo, victim fwk.PodInfo, _ *v1.Pod) bool {
		return pl.eligible([]fwk.PodInfo{victim})
	}
	// One pod at a time, from its spec: pods are ordered by their lost work
	// as in moreWorkToLose, then by upstream's order.
	dp.MoreImportantPod = func(a, b *v1.Pod) bool {
		now := pl.clock.Now()
		la, lb := reclaim.LostWork(a, api.PodGPUs(a, pl.gpu), now), reclaim.LostWork(b, api.PodGPUs(b, pl.gpu), now)
		if la != lb {
			return la > lb
		}
		return util.MoreImportantPod(a, b)
	}
	pl.evaluator = pl.newEvaluator(dp, h, fts)
}

// SelectVictimsOnNode is DefaultPreemption's choice, widened to whole gangs
// (withWholeGangs).
func (pl *ReclaimPreemption) SelectVictimsOnNode(ctx context.Context, state fwk.CycleState, preemptor *v1.Pod, nodeInfo fwk.NodeInfo,
	pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	pods, violations, status := pl.DefaultPreemption.SelectVictimsOnNode(ctx, state, preemptor, nodeInfo, pdbs)
	if !status.IsSuccess() {
		return pods, violations, status
	}
	return pl.withWholeGangs(pods), violations, status
}

// capAfter is preempt followed by capGrace, for a victim that preempt
// deleted: not for one it sent back to the queue in memory (a pod waiting at
// Permit, or one in PreBind on 1.36). Before 1.37 preempt does not say which
// it did, and which it does is decided inside it, so the API server is asked
// afterwards: only the same pod, being deleted, is deleted again.
func (pl *ReclaimPreemption) capAfter(ctx context.Context, victim *v1.Pod, preempt func() error) error {
	if err := preempt(); err != nil {
		return err
	}
	now, err := pl.handle.ClientSet().CoreV1().Pods(victim.Namespace).Get(ctx, victim.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s/%s after preempting it: %w", victim.Namespace, victim.Name, err)
	case now.UID != victim.UID || now.DeletionTimestamp == nil:
		return nil
	}
	return pl.capGrace(ctx, now)
}
