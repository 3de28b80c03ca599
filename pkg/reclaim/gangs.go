package reclaim

import (
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Unit is what is evicted together: one best-effort pod, or every live member
// of a gang (pods sharing a scheduler-plugins PodGroup label in one namespace,
// wherever they run). Evicting one member of a gang stops the whole job, so
// sparing the others would only keep GPUs busy with work that cannot progress.
type Unit struct {
	// Key is namespace/pod-group for a gang, namespace/name for a lone pod.
	Key     string
	Members []Candidate
	// LostWork sums the members' lost work.
	LostWork float64
	// Prepared: every member is (Candidate.Prepared).
	Prepared bool
}

// GPUsOn is the GPUs the unit's members hold on node.
func (u Unit) GPUsOn(node string) int64 {
	var gpus int64
	for _, m := range u.Members {
		if m.Pod.Spec.NodeName == node {
			gpus += m.GPUs
		}
	}
	return gpus
}

// Units groups candidates into eviction units. Pods already terminating are
// left out: they return their GPUs without another eviction and lose nothing more.
func Units(candidates []Candidate) []Unit {
	byKey := map[string]*Unit{}
	var keys []string
	for _, c := range candidates {
		if c.Pod.DeletionTimestamp != nil {
			continue
		}
		key := c.Pod.Namespace + "/" + c.Pod.Name
		if g := c.Pod.Labels[api.LabelPodGroup]; g != "" {
			key = c.Pod.Namespace + "/" + api.LabelPodGroup + "=" + g
		}
		u, ok := byKey[key]
		if !ok {
			u = &Unit{Key: key, Prepared: true}
			byKey[key] = u
			keys = append(keys, key)
		}
		u.Members = append(u.Members, c)
		u.LostWork += c.LostWork
		u.Prepared = u.Prepared && c.Prepared
	}
	sort.Strings(keys)
	units := make([]Unit, len(keys))
	for i, k := range keys {
		units[i] = *byKey[k]
		sort.Slice(units[i].Members, func(a, b int) bool { return units[i].Members[a].Pod.Name < units[i].Members[b].Pod.Name })
	}
	return units
}

// exhaustiveLimit bounds the exact search; a node holds few units in practice.
const exhaustiveLimit = 16

// Choose picks the units to evict so that at least owed GPUs come back on node:
// the set with the least total lost work, counting none for Prepared units
// (pods that checkpointed after their reclaim notice lose nothing they were
// not warned of, so they go first), then the fewest pods, then the fewest
// units. When no set frees enough, every unit that frees something on
// node is chosen. The result is in eviction order: least lost work first.
func Choose(units []Unit, node string, owed int64) []Unit {
	if owed <= 0 {
		return nil
	}
	var useful []Unit
	for _, u := range units {
		if u.GPUsOn(node) > 0 {
			useful = append(useful, u)
		}
	}
	sort.SliceStable(useful, func(i, j int) bool { return lessUnit(useful[i], useful[j], node) })
	var chosen []Unit
	if len(useful) <= exhaustiveLimit {
		chosen = cheapestCover(useful, node, owed)
	} else {
		// Too many for an exact search: least lost work first until covered.
		var freed int64
		for _, u := range useful {
			if freed >= owed {
				break
			}
			chosen = append(chosen, u)
			freed += u.GPUsOn(node)
		}
	}
	return chosen
}

func cheapestCover(units []Unit, node string, owed int64) []Unit {
	type cost struct {
		lost        float64
		pods, units int
	}
	better := func(a, b cost) bool {
		if a.lost != b.lost {
			return a.lost < b.lost
		}
		if a.pods != b.pods {
			return a.pods < b.pods
		}
		return a.units < b.units
	}
	bestMask, found := 0, false
	var best cost
	for mask := 1; mask < 1<<len(units); mask++ {
		var freed int64
		var c cost
		for i, u := range units {
			if mask&(1<<i) != 0 {
				freed += u.GPUsOn(node)
				if !u.Prepared {
					c.lost += u.LostWork
				}
				c.pods += len(u.Members)
				c.units++
			}
		}
		if freed >= owed && (!found || better(c, best)) {
			bestMask, best, found = mask, c, true
		}
	}
	if !found {
		return units
	}
	var chosen []Unit
	for i, u := range units {
		if bestMask&(1<<i) != 0 {
			chosen = append(chosen, u)
		}
	}
	return chosen
}

// lessUnit is the eviction order: prepared first, then least lost work,
// fewest pods, most GPUs back on node, key.
func lessUnit(a, b Unit, node string) bool {
	if a.Prepared != b.Prepared {
		return a.Prepared
	}
	if a.LostWork != b.LostWork {
		return a.LostWork < b.LostWork
	}
	if len(a.Members) != len(b.Members) {
		return len(a.Members) < len(b.Members)
	}
	if ga, gb := a.GPUsOn(node), b.GPUsOn(node); ga != gb {
		return ga > gb
	}
	return a.Key < b.Key
}

// Owed is the GPUs a node must return, and why (for the Events on its victims).
type Owed struct {
	Node string
	GPUs int64
	Why  string
}

// Take takes owed GPUs back, node by node in the order given: on each node
// the GPUs already terminating there count first (unless Overdue: those are
// owed), then Choose picks whole
// units and evict is called for each member. A unit with a member whose
// eviction evict refuses (returns an error, e.g. a PodDisruptionBudget) is set
// aside and the choice is made again among the rest. A gang member evicted for
// one node counts as terminating on every other node, so no node picks it
// again. Take returns the pods evicted, what each node still owes (only those
// owing something) and evict's errors. It is pure apart from evict: the
// controller passes one that calls the Eviction API, the simulator one that
// always succeeds.
func Take(owed []Owed, candidates []Candidate, evict func(Candidate, Owed) error) (evicted []Candidate, stillOwed []Owed, errs []error) {
	gone := map[*v1.Pod]bool{}
	for _, o := range owed {
		left := o.GPUs
		var live []Candidate
		for _, c := range candidates {
			switch {
			case c.Pod.DeletionTimestamp == nil && !gone[c.Pod]:
				// Only a unit with a member on the node can free GPUs there:
				// a lone pod elsewhere is no use to this node.
				if c.Pod.Spec.NodeName == o.Node || c.Pod.Labels[api.LabelPodGroup] != "" {
					live = append(live, c)
				}
			case c.Pod.Spec.NodeName == o.Node && !c.Overdue:
				left -= c.GPUs // on its way back
			}
		}
		if left <= 0 {
			continue
		}
		units := Units(live)
		for left > 0 && len(units) > 0 {
			chosen := Choose(units, o.Node, left)
			if len(chosen) == 0 {
				break
			}
			refused := false
			for _, u := range chosen {
				for _, m := range u.Members {
					if err := evict(m, o); err != nil {
						errs = append(errs, err)
						refused = true
						continue
					}
					gone[m.Pod] = true
					evicted = append(evicted, m)
					if m.Pod.Spec.NodeName == o.Node {
						left -= m.GPUs
					}
				}
			}
			if !refused {
				break
			}
			// Try again without every unit already acted on.
			acted := map[string]bool{}
			for _, u := range chosen {
				acted[u.Key] = true
			}
			rest := units[:0:0]
			for _, u := range units {
				if !acted[u.Key] {
					rest = append(rest, u)
				}
			}
			units = rest
		}
		if left > 0 {
			stillOwed = append(stillOwed, Owed{Node: o.Node, GPUs: left, Why: o.Why})
		}
	}
	return evicted, stillOwed, errs
}
