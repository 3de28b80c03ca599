// Package reclaimpreemption is the PostFilter plugin that lets an inference pod
// that does not fit take GPUs back from best-effort pods. It reuses the upstream
// preemption Evaluator (through DefaultPreemption's extension points) and changes
// only the policy: victims are best-effort pods, least lost work first, and
// best-effort pods never preempt.
package reclaimpreemption

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/utils/clock"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginmetrics"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// Name of the plugin in the scheduler configuration. Enable it in place of DefaultPreemption.
const Name = "ReclaimPreemption"

// ErrReasonBestEffort is why a best-effort pod gets no preemption.
const ErrReasonBestEffort = "best-effort pods never preempt"

// Args configures ReclaimPreemption.
type Args struct {
	pluginargs.BestEffort `json:",inline"`
	// MinCandidateNodesPercentage and MinCandidateNodesAbsolute bound the nodes dry-run
	// for preemption, as in DefaultPreemptionArgs. Defaults 10 and 100.
	MinCandidateNodesPercentage *int32 `json:"minCandidateNodesPercentage,omitempty"`
	MinCandidateNodesAbsolute   *int32 `json:"minCandidateNodesAbsolute,omitempty"`
}

// Default fills unset fields.
func (a *Args) Default() {
	a.BestEffort.Default()
	if a.MinCandidateNodesPercentage == nil {
		a.MinCandidateNodesPercentage = new(int32(10))
	}
	if a.MinCandidateNodesAbsolute == nil {
		a.MinCandidateNodesAbsolute = new(int32(100))
	}
}

// Validate checks defaulted args.
func (a *Args) Validate(path *field.Path) field.ErrorList {
	errs := a.BestEffort.Validate(path)
	if p := *a.MinCandidateNodesPercentage; p < 0 || p > 100 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesPercentage"), p, "must be in [0, 100]"))
	}
	if n := *a.MinCandidateNodesAbsolute; n < 0 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesAbsolute"), n, "must be non-negative"))
	}
	if *a.MinCandidateNodesPercentage == 0 && *a.MinCandidateNodesAbsolute == 0 {
		errs = append(errs, field.Invalid(path.Child("minCandidateNodesAbsolute"), 0, "must be positive when minCandidateNodesPercentage is 0"))
	}
	return errs
}

// ReclaimPreemption wraps DefaultPreemption with Gleaner's victim policy.
type ReclaimPreemption struct {
	*defaultpreemption.DefaultPreemption
	threshold int32
	gpu       v1.ResourceName
	clock     clock.PassiveClock
}

var (
	_ fwk.PostFilterPlugin  = &ReclaimPreemption{}
	_ fwk.PreEnqueuePlugin  = &ReclaimPreemption{}
	_ fwk.EnqueueExtensions = &ReclaimPreemption{}
)

// New builds the plugin.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	var args Args
	if err := pluginargs.Decode(Name, obj, &args); err != nil {
		return nil, err
	}
	pluginmetrics.Register()
	fts := plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	dp, err := defaultpreemption.New(ctx, &config.DefaultPreemptionArgs{
		MinCandidateNodesPercentage: *args.MinCandidateNodesPercentage,
		MinCandidateNodesAbsolute:   *args.MinCandidateNodesAbsolute,
	}, h, fts)
	if err != nil {
		return nil, err
	}
	pl := &ReclaimPreemption{DefaultPreemption: dp, threshold: args.Threshold(), gpu: args.Resource(), clock: clock.RealClock{}}
	// The Evaluator was built with the embedded DefaultPreemption as its Interface,
	// so these hooks are what its SelectVictimsOnNode consults.
	dp.IsEligiblePod = pl.isEligibleVictim
	dp.MoreImportantVictim = pl.moreImportantVictim
	// The Evaluator names the plugin in nominations and metrics.
	dp.Evaluator.PluginName = Name
	return pl, nil
}

// Name returns the plugin name.
func (pl *ReclaimPreemption) Name() string { return Name }

// PostFilter refuses preemption to best-effort pods, whatever their
// PriorityClass's preemptionPolicy says, and runs the upstream Evaluator for the rest.
func (pl *ReclaimPreemption) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if api.IsBestEffort(pod, pl.threshold) {
		pluginmetrics.Preemptions.WithLabelValues("refused").Inc()
		return nil, fwk.NewStatus(fwk.Unschedulable, ErrReasonBestEffort)
	}
	result, status := pl.DefaultPreemption.PostFilter(ctx, state, pod, m)
	if status.IsSuccess() {
		pluginmetrics.Preemptions.WithLabelValues("nominated").Inc()
	} else {
		pluginmetrics.Preemptions.WithLabelValues("failed").Inc()
	}
	return result, status
}

// isEligibleVictim: only best-effort pods are ever taken, and a gang only as a whole.
func (pl *ReclaimPreemption) isEligibleVictim(_ fwk.NodeInfo, victim preemption.Victim, _ *v1.Pod) bool {
	for _, pi := range victim.Pods() {
		if !api.IsBestEffort(pi.GetPod(), pl.threshold) {
			return false
		}
	}
	return true
}

// moreImportantVictim orders victims so the Evaluator reprieves the ones with the
// most work to lose first and so evicts those with the least lost work.
// Upstream's order (priority, then age) breaks ties.
func (pl *ReclaimPreemption) moreImportantVictim(a, b preemption.Victim) bool {
	now := pl.clock.Now()
	la, lb := pl.lostWork(a, now), pl.lostWork(b, now)
	if la != lb {
		return la > lb
	}
	return preemption.MoreImportantVictim(a, b)
}

func (pl *ReclaimPreemption) lostWork(v preemption.Victim, now time.Time) float64 {
	var total float64
	for _, pi := range v.Pods() {
		p := pi.GetPod()
		total += reclaim.LostWork(p, api.PodGPUs(p, pl.gpu), now)
	}
	return total
}
