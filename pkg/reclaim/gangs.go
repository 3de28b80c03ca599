package reclaim

import (
	"context"
	"sort"

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
			u = &Unit{Key: key}
			byKey[key] = u
			keys = append(keys, key)
		}
		u.Members = append(u.Members, c)
		u.LostWork += c.LostWork
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
// the set with the least total lost work, then the fewest pods, then the
// fewest units. When no set frees enough, every unit that frees something on
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
				c.lost += u.LostWork
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

// lessUnit is the eviction order: least lost work, fewest pods, most GPUs back on node, key.
func lessUnit(a, b Unit, node string) bool {
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

// ReclaimNode evicts whole units until owed GPUs (beyond those already
// terminating on node) are on their way back to node. An eviction that is
// refused (e.g. by a PodDisruptionBudget) is reported, its unit set aside, and
// the choice is made again among the rest. It returns the pods evicted and the
// GPUs still owed.
func (e *Evictor) ReclaimNode(ctx context.Context, node string, candidates []Candidate, owed int64, why string) (evicted []Candidate, stillOwed int64, errs []error) {
	for _, c := range candidates {
		if c.Pod.DeletionTimestamp != nil && c.Pod.Spec.NodeName == node {
			owed -= c.GPUs
		}
	}
	units := Units(candidates)
	for owed > 0 && len(units) > 0 {
		chosen := Choose(units, node, owed)
		if len(chosen) == 0 {
			break
		}
		refused := map[string]bool{}
		for _, u := range chosen {
			for _, m := range u.Members {
				if err := e.Evict(ctx, m.Pod, why); err != nil {
					errs = append(errs, err)
					refused[u.Key] = true
					continue
				}
				evicted = append(evicted, m)
				if m.Pod.Spec.NodeName == node {
					owed -= m.GPUs
				}
			}
		}
		if len(refused) == 0 {
			break
		}
		// Try again without every unit already acted on.
		acted := map[string]bool{}
		for _, u := range chosen {
			acted[u.Key] = true
		}
		var rest []Unit
		for _, u := range units {
			if !acted[u.Key] {
				rest = append(rest, u)
			}
		}
		units = rest
	}
	return evicted, max(owed, 0), errs
}
