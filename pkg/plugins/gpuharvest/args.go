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
	// ControllerLease is the gleaner-controller's leader-election Lease, read as its
	// heartbeat. Default gleaner-system/gleaner-controller.
	ControllerLease LeaseRef `json:"controllerLease,omitempty"`
}

// LeaseRef names a Lease.
type LeaseRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// Default fills unset fields.
func (a *Args) Default() {
	a.BestEffort.Default()
	if a.ControllerLease.Namespace == "" {
		a.ControllerLease.Namespace = api.SystemNamespace
	}
	if a.ControllerLease.Name == "" {
		a.ControllerLease.Name = api.ControllerLeaseName
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
	return errs
}
