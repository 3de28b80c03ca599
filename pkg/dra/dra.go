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
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
)

// Facts are the DRA objects a count reads.
type Facts struct {
	Classes []*resourceapi.DeviceClass
	Slices  []*resourceapi.ResourceSlice
	Claims  []*resourceapi.ResourceClaim
	// TaintRules are the DeviceTaintRules (none where the API server does
	// not serve them).
	TaintRules []*resourceapi.DeviceTaintRule
}

// Count is what DRA publishes of the fleet's GPUs.
type Count struct {
	// Nodes holds, by node name, every node that has a GPU published
	// through DRA, or a problem counting one.
	Nodes map[string]Node
	// Held is the GPUs each pod's claims hold, for a service's replica size.
	// (A node's GPUs are counted by device: Node.Held.)
	Held map[types.UID]int64
	// Problems are what keeps GPUs from being counted anywhere (a GPU class
	// whose selector does not compile, GPUs in a pool no one node holds).
	Problems []string
}

// Node is one node's GPUs as DRA publishes them.
type Node struct {
	// GPUs are the devices published for the node that a GPU class selects.
	GPUs int64
	// Held are those none can be lent: allocated to a claim (whoever it is
	// reserved for, if anyone: the allocator gives them to no one else),
	// or tainted so that the allocator gives them to no pod that does not
	// tolerate it. The claims the scheduler makes for pods' extended
	// requests are not in it: api.PodGPUs counts those from the requests.
	Held int64
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

// deviceID names a device as an allocation result does.
type deviceID struct{ driver, pool, device string }

// gpuDevice is a GPU a slice publishes.
type gpuDevice struct {
	id      deviceID
	node    string // "" when not one node's
	tainted bool   // by the slice (NoSchedule or NoExecute)
}

// sliceDevices is a slice's GPUs as last judged.
type sliceDevices struct {
	version, classes string
	gpus             []gpuDevice
	// nodes are the nodes the slice's devices are on.
	nodes []string
	// problem is why its GPUs cannot be counted.
	problem string
}

// NewCounter returns a Counter for the GPU resource (e.g. nvidia.com/gpu).
func NewCounter(gpu v1.ResourceName) *Counter {
	return &Counter{
		gpu:    gpu,
		cel:    cel.NewCache(64, cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true}),
		slices: map[types.UID]sliceDevices{},
	}
}

// poolKey names a pool.
type poolKey struct{ driver, pool string }

// Count counts the GPUs in facts. pods are every pod: a claim's holders are
// read from them.
func (c *Counter) Count(ctx context.Context, f Facts, pods []*v1.Pod) Count {
	out := Count{Nodes: map[string]Node{}, Held: map[types.UID]int64{}}
	classes, classesKey, classProblem := c.gpuClasses(f.Classes)
	if classProblem != "" {
		out.Problems = append(out.Problems, classProblem)
	}
	if len(classes) == 0 && len(f.Slices) > 0 {
		out.Problems = append(out.Problems, fmt.Sprintf("no DeviceClass has extendedResourceName %s: Gleaner counts no GPU that DRA publishes, and lends none", c.gpu))
	}
	problem := func(node, why string) {
		n := out.Nodes[node]
		if n.Problem == "" {
			n.Problem = why
			out.Nodes[node] = n
		}
	}

	// Only a pool's newest generation counts, and only when exactly its
	// slices are published, as the allocator reads pools.
	type poolSeen struct{ generation, want, have int64 }
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

	devices := map[deviceID]*gpuDevice{}
	seen := map[types.UID]bool{}
	for _, s := range f.Slices {
		p := pools[poolKey{s.Spec.Driver, s.Spec.Pool.Name}]
		if s.Spec.Pool.Generation != p.generation {
			continue
		}
		seen[s.UID] = true
		judged := c.judge(ctx, s, classes, classesKey, classProblem)
		why := judged.problem
		if why == "" && p.have != p.want && len(judged.gpus) > 0 {
			why = fmt.Sprintf("pool %s of driver %s is not fully published", s.Spec.Pool.Name, s.Spec.Driver)
		}
		if why != "" {
			for _, n := range judged.nodes {
				problem(n, why)
			}
			if len(judged.nodes) == 0 {
				out.Problems = append(out.Problems, fmt.Sprintf("ResourceSlice %s: %s", s.Name, why))
			}
		}
		for i := range judged.gpus {
			d := &judged.gpus[i]
			if d.node == "" {
				out.Problems = append(out.Problems, fmt.Sprintf("ResourceSlice %s publishes GPUs of driver %s that no one node holds (pool %s): Gleaner counts GPUs per node only, and does not count these", s.Name, s.Spec.Driver, s.Spec.Pool.Name))
				break
			}
			if _, dup := devices[d.id]; dup {
				problem(d.node, fmt.Sprintf("pool %s of driver %s publishes device %s twice", d.id.pool, d.id.driver, d.id.device))
				continue
			}
			n := out.Nodes[d.node]
			n.GPUs++
			out.Nodes[d.node] = n
			devices[d.id] = d
		}
	}
	for uid := range c.slices {
		if !seen[uid] {
			delete(c.slices, uid)
		}
	}

	// Pods are looked up only for allocated claims: none, on most fleets.
	var byUID map[types.UID]*v1.Pod
	pod := func(uid types.UID) *v1.Pod {
		if byUID == nil {
			byUID = make(map[types.UID]*v1.Pod, len(pods))
			for _, p := range pods {
				byUID[p.UID] = p
			}
		}
		return byUID[uid]
	}
	allocated := map[deviceID]bool{}
	for _, claim := range f.Claims {
		a := claim.Status.Allocation
		if a == nil {
			continue
		}
		holders := podHolders(claim)
		fromRequest := extendedRequests(claim, holders, pod, c.gpu)
		for _, r := range a.Devices.Results {
			id := deviceID{r.Driver, r.Pool, r.Device}
			d, ok := devices[id]
			if !ok {
				if _, published := pools[poolKey{r.Driver, r.Pool}]; !published {
					// Its pool is gone (a driver restarting): what it held
					// is not known, so its holders' nodes lend nothing.
					for _, uid := range holders {
						if p := pod(uid); p != nil && p.Spec.NodeName != "" {
							problem(p.Spec.NodeName, fmt.Sprintf("claim %s/%s holds device %s of pool %s of driver %s, which is no longer published", claim.Namespace, claim.Name, r.Device, r.Pool, r.Driver))
						}
					}
				}
				continue
			}
			// Admin access watches a device without holding it, as the
			// allocator counts it.
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			if allocated[id] {
				continue
			}
			allocated[id] = true
			if fromRequest[r.Request] {
				continue
			}
			n := out.Nodes[d.node]
			n.Held++
			out.Nodes[d.node] = n
			if len(holders) > 0 {
				// A claim several pods share is one replica's size.
				out.Held[holders[0]]++
			}
		}
	}
	// A GPU no claim holds is held still when a taint keeps it from pods.
	for id, d := range devices {
		if !allocated[id] && (d.tainted || taintedByRule(f.TaintRules, id)) {
			n := out.Nodes[d.node]
			n.Held++
			out.Nodes[d.node] = n
		}
	}
	return out
}

// extendedRequests are the requests of the claim the scheduler made for a
// pod's extended request of the GPU resource: the pod's own request counts
// them. Nil for any other claim, or before the pod's status names it (then
// its devices are counted as held: more, never less).
func extendedRequests(claim *resourceapi.ResourceClaim, holders []types.UID, pod func(types.UID) *v1.Pod, gpu v1.ResourceName) map[string]bool {
	if claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || len(holders) == 0 {
		return nil
	}
	p := pod(holders[0])
	if p == nil || p.Status.ExtendedResourceClaimStatus == nil || p.Status.ExtendedResourceClaimStatus.ResourceClaimName != claim.Name {
		return nil
	}
	out := map[string]bool{}
	for _, m := range p.Status.ExtendedResourceClaimStatus.RequestMappings {
		if v1.ResourceName(m.ResourceName) == gpu {
			out[m.RequestName] = true
		}
	}
	return out
}

// taintedByRule: a DeviceTaintRule keeps the device from pods that do not
// tolerate it.
func taintedByRule(rules []*resourceapi.DeviceTaintRule, id deviceID) bool {
	for _, r := range rules {
		if !blocks(r.Spec.Taint) {
			continue
		}
		sel := r.Spec.DeviceSelector
		if sel == nil || ((sel.Driver == nil || *sel.Driver == id.driver) &&
			(sel.Pool == nil || *sel.Pool == id.pool) && (sel.Device == nil || *sel.Device == id.device)) {
			return true
		}
	}
	return false
}

// blocks: the taint keeps the device from pods that do not tolerate it.
func blocks(t resourceapi.DeviceTaint) bool {
	return t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute
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
	perDevice := s.Spec.PerDeviceNodeSelection != nil && *s.Spec.PerDeviceNodeSelection
	for i := range s.Spec.Devices {
		dev := &s.Spec.Devices[i]
		node := ptr.Deref(s.Spec.NodeName, "")
		if perDevice {
			node = ptr.Deref(dev.NodeName, "")
		}
		if node != "" && !slices.Contains(d.nodes, node) {
			d.nodes = append(d.nodes, node)
		}
		gpu, err := isGPU(ctx, classes, s.Spec.Driver, dev)
		if err != nil {
			d.problem = firstProblem(d.problem, fmt.Sprintf("device %s of driver %s: a GPU class's selector failed: %v", dev.Name, s.Spec.Driver, err))
			continue
		}
		if !gpu {
			continue
		}
		switch {
		case len(dev.ConsumesCounters) > 0:
			d.problem = firstProblem(d.problem, fmt.Sprintf("GPU %s of driver %s is a partition that shares its counters with others (MIG or another partitioning): Gleaner cannot count partitions", dev.Name, s.Spec.Driver))
		case dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations:
			d.problem = firstProblem(d.problem, fmt.Sprintf("GPU %s of driver %s may be shared by several claims (consumable capacity): Gleaner counts whole GPUs only", dev.Name, s.Spec.Driver))
		}
		g := gpuDevice{id: deviceID{s.Spec.Driver, s.Spec.Pool.Name, dev.Name}, node: node}
		for _, t := range dev.Taints {
			g.tainted = g.tainted || blocks(t)
		}
		d.gpus = append(d.gpus, g)
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
