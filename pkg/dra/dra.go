// Package dra counts the GPUs that Dynamic Resource Allocation publishes,
// from the facts the scheduler's DynamicResources plugin allocates from:
// ResourceSlices for the devices each node has, allocated ResourceClaims for
// the devices held and the pods that hold them.
//
// Which devices are GPUs is said by the DeviceClasses whose
// extendedResourceName is the GPU resource (KEP-5004): a pod that asks for
// nvidia.com/gpu on a node that does not advertise it is given devices of
// such a class, so a device any of their selectors selects is a GPU.
//
// A GPU Gleaner cannot count is never lent: a node with one carries a
// Problem, and the controller lends nothing there. That covers devices that
// are partitions of a GPU (MIG: they consume a GPU's shared counters), that
// several claims may share (consumable capacity), a pool whose slices are
// not all published yet, and selectors that fail on a device.
package dra

import (
	"context"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
)

// Facts are the DRA objects a count reads.
type Facts struct {
	Classes []*resourceapi.DeviceClass
	Slices  []*resourceapi.ResourceSlice
	Claims  []*resourceapi.ResourceClaim
}

// Count is what DRA publishes of the fleet's GPUs.
type Count struct {
	// Nodes holds, by node name, every node that has a GPU published
	// through DRA, or a problem counting one.
	Nodes map[string]Node
	// Held is the GPUs each pod holds through its claims. The claim the
	// scheduler makes for a pod's extended request is not counted here for
	// the GPU resource's requests: api.PodGPUs counts those from the request.
	Held map[types.UID]int64
	// Problems are what keeps GPUs from being counted anywhere (a GPU class
	// whose selector does not compile, GPUs in a pool no one node holds).
	Problems []string
}

// Node is one node's GPUs as DRA publishes them.
type Node struct {
	// GPUs are the devices published for the node that a GPU class selects.
	GPUs int64
	// Unreserved are GPUs allocated to claims no pod holds: no pod uses
	// them and none can be placed on them.
	Unreserved int64
	// Problem says why the node's GPUs cannot be counted (empty: they can).
	// Nothing is lent on such a node.
	Problem string
}

// Counter counts GPUs for one GPU resource name. It keeps, for each slice,
// which of its devices are GPUs, so a round evaluates selectors only for
// slices or classes that changed. It is not safe for concurrent use.
type Counter struct {
	gpu    v1.ResourceName
	cel    *cel.Cache
	slices map[types.UID]sliceDevices
}

// sliceDevices is a slice's devices as last judged.
type sliceDevices struct {
	version, classes string
	node             string // the node the slice's devices are on ("" for several)
	gpus             []string
	problem          string
}

// NewCounter returns a Counter for the GPU resource (e.g. nvidia.com/gpu).
func NewCounter(gpu v1.ResourceName) *Counter {
	return &Counter{
		gpu:    gpu,
		cel:    cel.NewCache(64, cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true}),
		slices: map[types.UID]sliceDevices{},
	}
}

// deviceKey names a device as an allocation result does.
func deviceKey(driver, pool, device string) string { return driver + "/" + pool + "/" + device }

// poolKey names a pool.
type poolKey struct{ driver, pool string }

// Count counts the GPUs in facts; pods are the pods that may hold claims
// (only those with an extended-resource claim are read).
func (c *Counter) Count(ctx context.Context, f Facts, pods []*v1.Pod) Count {
	out := Count{Nodes: map[string]Node{}, Held: map[types.UID]int64{}}
	classes, classesKey, classProblem := c.gpuClasses(f.Classes)
	if classProblem != "" {
		out.Problems = append(out.Problems, classProblem)
	}
	if len(classes) == 0 && len(f.Slices) > 0 {
		out.Problems = append(out.Problems, fmt.Sprintf("no DeviceClass has extendedResourceName %s: Gleaner counts no GPU that DRA publishes, and lends none", c.gpu))
	}

	// Only a pool's newest generation counts, and only once all its slices
	// are published.
	type poolSeen struct {
		generation int64
		want       int64
		have       int64
	}
	pools := map[poolKey]*poolSeen{}
	for _, s := range f.Slices {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		p := pools[k]
		if p == nil || s.Spec.Pool.Generation > p.generation {
			p = &poolSeen{generation: s.Spec.Pool.Generation, want: s.Spec.Pool.ResourceSliceCount}
			pools[k] = p
		}
		if s.Spec.Pool.Generation == p.generation {
			p.have++
		}
	}

	node := func(name string) Node { return out.Nodes[name] }
	devices := map[string]string{} // GPU device key -> its node
	seen := map[types.UID]bool{}
	for _, s := range f.Slices {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		p := pools[k]
		if s.Spec.Pool.Generation != p.generation {
			continue
		}
		seen[s.UID] = true
		judged := c.judge(ctx, s, classes, classesKey, classProblem)
		if len(judged.gpus) == 0 && judged.problem == "" {
			continue
		}
		if judged.node == "" {
			if len(judged.gpus) > 0 {
				out.Problems = append(out.Problems, fmt.Sprintf("ResourceSlice %s publishes GPUs of driver %s that no one node holds (pool %s): Gleaner counts GPUs per node only, and does not count these", s.Name, s.Spec.Driver, s.Spec.Pool.Name))
			}
			continue
		}
		n := node(judged.node)
		switch {
		case judged.problem != "":
			n.Problem = firstProblem(n.Problem, judged.problem)
		case p.have < p.want:
			n.Problem = firstProblem(n.Problem, fmt.Sprintf("pool %s of driver %s is not fully published (%d of %d slices)", s.Spec.Pool.Name, s.Spec.Driver, p.have, p.want))
		}
		n.GPUs += int64(len(judged.gpus))
		for _, d := range judged.gpus {
			devices[deviceKey(s.Spec.Driver, s.Spec.Pool.Name, d)] = judged.node
		}
		out.Nodes[judged.node] = n
	}
	for uid := range c.slices {
		if !seen[uid] {
			delete(c.slices, uid)
		}
	}

	byUID := make(map[types.UID]*v1.Pod)
	for _, p := range pods {
		if p.Status.ExtendedResourceClaimStatus != nil {
			byUID[p.UID] = p
		}
	}
	for _, claim := range f.Claims {
		a := claim.Status.Allocation
		if a == nil {
			continue
		}
		holders := podHolders(claim)
		// The requests the scheduler made for a pod's GPU resource: the
		// pod's own request counts them.
		var fromRequest map[string]bool
		if claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] == "true" && len(holders) > 0 {
			if p := byUID[holders[0]]; p != nil && p.Status.ExtendedResourceClaimStatus.ResourceClaimName == claim.Name {
				fromRequest = map[string]bool{}
				for _, m := range p.Status.ExtendedResourceClaimStatus.RequestMappings {
					if v1.ResourceName(m.ResourceName) == c.gpu {
						fromRequest[m.RequestName] = true
					}
				}
			}
		}
		var gpus int64
		var on string
		for _, r := range a.Devices.Results {
			n, ok := devices[deviceKey(r.Driver, r.Pool, r.Device)]
			if !ok || fromRequest[r.Request] {
				continue
			}
			gpus++
			on = n
		}
		if gpus == 0 {
			continue
		}
		if len(holders) == 0 {
			n := node(on)
			n.Unreserved += gpus
			out.Nodes[on] = n
			continue
		}
		// A claim several pods share holds its devices once.
		out.Held[holders[0]] += gpus
	}
	return out
}

// podHolders are the UIDs of the pods a claim is reserved for, in order.
func podHolders(claim *resourceapi.ResourceClaim) []types.UID {
	var out []types.UID
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			out = append(out, r.UID)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func firstProblem(have, next string) string {
	if have != "" {
		return have
	}
	return next
}

// gpuClass is a DeviceClass that names the GPU resource, with its
// compiled selectors.
type gpuClass struct {
	name      string
	selectors []cel.CompilationResult
}

// gpuClasses are the DeviceClasses that name the GPU resource, a key that
// changes when any of them does, and a problem when a selector is not usable.
func (c *Counter) gpuClasses(all []*resourceapi.DeviceClass) ([]gpuClass, string, string) {
	var out []gpuClass
	var key strings.Builder
	var problem string
	for _, dc := range all {
		if dc.Spec.ExtendedResourceName == nil || v1.ResourceName(*dc.Spec.ExtendedResourceName) != c.gpu {
			continue
		}
		fmt.Fprintf(&key, "%s@%s,", dc.UID, dc.ResourceVersion)
		g := gpuClass{name: dc.Name}
		for _, sel := range dc.Spec.Selectors {
			if sel.CEL == nil {
				problem = firstProblem(problem, fmt.Sprintf("DeviceClass %s has a selector Gleaner cannot read (only CEL selectors)", dc.Name))
				continue
			}
			r := c.cel.GetOrCompile(sel.CEL.Expression)
			if r.Error != nil {
				problem = firstProblem(problem, fmt.Sprintf("DeviceClass %s: selector does not compile: %v", dc.Name, r.Error))
				continue
			}
			g.selectors = append(g.selectors, r)
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, key.String(), problem
}

// judge finds a slice's GPUs, from its cache entry when neither the slice
// nor the classes changed.
func (c *Counter) judge(ctx context.Context, s *resourceapi.ResourceSlice, classes []gpuClass, classesKey, classProblem string) sliceDevices {
	if d, ok := c.slices[s.UID]; ok && d.version == s.ResourceVersion && d.classes == classesKey && s.ResourceVersion != "" {
		return d
	}
	d := sliceDevices{version: s.ResourceVersion, classes: classesKey}
	if s.Spec.NodeName != nil {
		d.node = *s.Spec.NodeName
	}
	perDevice := s.Spec.PerDeviceNodeSelection != nil && *s.Spec.PerDeviceNodeSelection
	for i := range s.Spec.Devices {
		dev := &s.Spec.Devices[i]
		gpu, err := isGPU(ctx, classes, s.Spec.Driver, dev)
		if err != nil {
			d.problem = firstProblem(d.problem, fmt.Sprintf("device %s of driver %s: a GPU class's selector failed: %v", dev.Name, s.Spec.Driver, err))
			continue
		}
		if !gpu {
			continue
		}
		if perDevice {
			if dev.NodeName == nil || (d.node != "" && d.node != *dev.NodeName) {
				d.node = ""
				d.problem = firstProblem(d.problem, "a slice's GPUs are on several nodes")
				break
			}
			d.node = *dev.NodeName
		}
		switch {
		case len(dev.ConsumesCounters) > 0:
			d.problem = firstProblem(d.problem, fmt.Sprintf("GPU %s of driver %s is a partition that shares its counters with others (MIG or another partitioning): Gleaner cannot count partitions", dev.Name, s.Spec.Driver))
		case dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations:
			d.problem = firstProblem(d.problem, fmt.Sprintf("GPU %s of driver %s may be shared by several claims (consumable capacity): Gleaner counts whole GPUs only", dev.Name, s.Spec.Driver))
		}
		d.gpus = append(d.gpus, dev.Name)
	}
	if classProblem != "" && len(s.Spec.Devices) > 0 {
		// Which of these devices are GPUs is not known: fail closed.
		d.problem = firstProblem(d.problem, classProblem)
	}
	if s.ResourceVersion != "" {
		c.slices[s.UID] = d
	}
	return d
}

// isGPU reports whether any GPU class selects the device (a class selects a
// device every one of its selectors matches).
func isGPU(ctx context.Context, classes []gpuClass, driver string, dev *resourceapi.Device) (bool, error) {
	in := cel.Device{Driver: driver, AllowMultipleAllocations: dev.AllowMultipleAllocations, Attributes: dev.Attributes, Capacity: dev.Capacity}
	for _, class := range classes {
		all := true
		for _, sel := range class.selectors {
			ok, _, err := sel.DeviceMatches(ctx, in)
			if err != nil {
				return false, err
			}
			if !ok {
				all = false
				break
			}
		}
		if all {
			return true, nil
		}
	}
	return false, nil
}
