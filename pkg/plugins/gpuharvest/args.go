package gpuharvest

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/pluginargs"
)

// Args configures GPUHarvest (pluginConfig args in the KubeSchedulerConfiguration).
type Args struct {
	pluginargs.BestEffort `json:",inline"`
	// ControllerLease is gleaner-controller's heartbeat Lease, renewed after
	// every planning round that published every verdict. Default
	// gleaner-system/gleaner-controller-heartbeat.
	ControllerLease LeaseRef `json:"controllerLease,omitempty"`
	// HeartbeatTimeoutSeconds, when set, is how long after this scheduler last
	// saw the Lease renewed (on its own clock) the heartbeat counts as stale,
	// instead of the Lease's own leaseDurationSeconds.
	HeartbeatTimeoutSeconds *int32 `json:"heartbeatTimeoutSeconds,omitempty"`
	// ScoreWeights weigh Score's parts. Default 1, 1 and 1.
	ScoreWeights ScoreWeights `json:"scoreWeights,omitempty"`
}

// ScoreWeights weigh the parts of GPUHarvest's score.
type ScoreWeights struct {
	// Packing favours nodes whose harvestable GPUs are already mostly lent.
	Packing *int32 `json:"packing,omitempty"`
	// IdleWindow favours nodes that serve less inference, whose GPUs the planner
	// takes back last.
	IdleWindow *int32 `json:"idleWindow,omitempty"`
	// Availability favours, for a pod that declares its checkpoint interval
	// (annotation gleaner.dev/checkpoint-interval), nodes whose lendable GPUs
	// are likely to stay lent that long (the controller's
	// gleaner.dev/availability); short jobs go to short windows.
	Availability *int32 `json:"availability,omitempty"`
}

// LeaseRef names a Lease.
type LeaseRef struct {
	// Namespace of the Lease.
	Namespace string `json:"namespace,omitempty"`
	// Name of the Lease.
	Name string `json:"name,omitempty"`
}

// Default fills unset fields.
func (a *Args) Default() {
	a.BestEffort.Default()
	if a.ControllerLease.Namespace == "" {
		a.ControllerLease.Namespace = api.SystemNamespace
	}
	if a.ControllerLease.Name == "" {
		a.ControllerLease.Name = api.HeartbeatLeaseName
	}
	if a.ScoreWeights.Packing == nil {
		a.ScoreWeights.Packing = new(int32(1))
	}
	if a.ScoreWeights.IdleWindow == nil {
		a.ScoreWeights.IdleWindow = new(int32(1))
	}
	if a.ScoreWeights.Availability == nil {
		a.ScoreWeights.Availability = new(int32(1))
	}
}

// Validate checks defaulted args.
func (a *Args) Validate(path *field.Path) field.ErrorList {
	errs := a.BestEffort.Validate(path)
	for _, msg := range validation.IsDNS1123Label(a.ControllerLease.Namespace) {
		errs = append(errs, field.Invalid(path.Child("controllerLease", "namespace"), a.ControllerLease.Namespace, msg))
	}
	for _, msg := range validation.IsDNS1123Subdomain(a.ControllerLease.Name) {
		errs = append(errs, field.Invalid(path.Child("controllerLease", "name"), a.ControllerLease.Name, msg))
	}
	if t := a.HeartbeatTimeoutSeconds; t != nil && *t <= 0 {
		errs = append(errs, field.Invalid(path.Child("heartbeatTimeoutSeconds"), *t, "must be greater than 0 (omit it to use the Lease's duration)"))
	}
	w := a.ScoreWeights
	for name, v := range map[string]int32{"packing": *w.Packing, "idleWindow": *w.IdleWindow, "availability": *w.Availability} {
		if v < 0 || v > 100 {
			errs = append(errs, field.Invalid(path.Child("scoreWeights", name), v, "must be in [0, 100]"))
		}
	}
	if *w.Packing == 0 && *w.IdleWindow == 0 {
		errs = append(errs, field.Invalid(path.Child("scoreWeights"), "0, 0", "at least one weight must be positive"))
	}
	return errs
}
