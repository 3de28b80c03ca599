package reclaim

import (
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Unit is what is evicted together: one best-effort pod, or every live member
// of a gang (pods naming one PodGroup, native or scheduler-plugins, in one
// namespace, wherever they run: api.GangKey). Evicting one member of a rigid gang stops the whole job,
// so sparing the others would only keep GPUs busy with work that cannot
// progress. An elastic gang (more live members than its quorum) may instead
// shed members one at a time, each its own Unit, down to its quorum.
type Unit struct {
	// Key is the gang's api.GangKey for a gang, namespace/name for a lone pod,
	// the gang's key/name for one member an elastic gang sheds.
	Key     string
	Members []Candidate
	// LostWork sums the members' lost work.
	LostWork float64
	// Prepared: every member is (Candidate.Prepared).
	Prepared bool
	// Noticed: a member is (Candidate.Noticed, or Prepared): a gang goes
	// whole, so a notice to one of its members is a notice to the gang, and a
	// member added since cannot take the gang out of its turn.
	Noticed bool

	// For a member an elastic gang sheds: the gang's Key and how many of its
	// members may go (live members above the quorum).
	gang  string
	spare int
	// elastic: the unit is an elastic gang whole, which sheds members instead.
	elastic bool
}

// GPUsOn is the GPUs the unit's members hold on node.
func (u Unit) GPUsOn(node string) int64 {
	gpus, _ := u.on(node)
	return gpus
}

// on is the GPUs the unit's members hold on node, and what evicting the unit
// costs when choosing for node: the least lost work of its members there
// (the sum, for an elastic gang whole).
//
//	cost(unit, node) = min { LostWork(m) : m a member on node }
//	cost(elastic gang whole, node) = sum { LostWork(m) : m a member on node }
//
// A lone pod costs its own lost work. A rigid gang costs no more than its
// cheapest member on the node would alone: membership is the tenant's label
// and its PodGroup the tenant's object, so whether the other members really
// lose their work with it is a claim Gleaner cannot check. Summed, the claim
// would let a tenant make its pods look expensive (one PodGroup over its pods
// across the cluster, minMember at the member count or above) and another
// tenant's pods go first; counted this way, joining a gang never protects a
// pod, and a real gang is taken only where one of its members is the
// cheapest to take. An elastic gang whole costs at least what shedding its
// members on the node would, so it sheds before it goes whole; it can claim
// no more than the members it holds on the node lose, each of which it could
// shed at its own cost. Lost work is GPUs x run time since start or
// checkpoint, which the tenant cannot raise.
func (u Unit) on(node string) (gpus int64, cost float64) {
	var least, sum float64
	first := true
	for _, m := range u.Members {
		if m.Pod.Spec.NodeName != node {
			continue
		}
		gpus += m.GPUs
		sum += m.LostWork
		if first || m.LostWork < least {
			least, first = m.LostWork, false
		}
	}
	if u.elastic {
		return gpus, sum
	}
	return gpus, least
}

// Units groups candidates into eviction units. Pods already terminating are
// left out: they return their GPUs without another eviction and lose nothing
// more. An elastic gang gives its whole Unit and, besides, one Unit per
// member it could shed; Choose never takes a gang whole and a member of it,
// nor more members than the gang can spare.
func Units(candidates []Candidate) []Unit {
	byKey := map[string]*Unit{}
	quorum := map[string]int32{}
	var keys []string
	for _, c := range candidates {
		if c.Pod.DeletionTimestamp != nil {
			continue
		}
		key := api.GangKey(c.Pod)
		if key == "" {
			key = c.Pod.Namespace + "/" + c.Pod.Name
		}
		u, ok := byKey[key]
		if !ok {
			u = &Unit{Key: key, Prepared: true}
			byKey[key] = u
			keys = append(keys, key)
			quorum[key] = c.Quorum
		}
		u.Members = append(u.Members, c)
		u.LostWork += c.LostWork
		u.Prepared = u.Prepared && c.Prepared
		u.Noticed = u.Noticed || c.warned()
		// Members that disagree (or one that does not know) make the gang rigid.
		if c.Quorum != quorum[key] {
			quorum[key] = 0
		}
	}
	sort.Strings(keys)
	units := make([]Unit, 0, len(keys))
	for _, k := range keys {
		u := *byKey[k]
		sort.Slice(u.Members, func(a, b int) bool { return u.Members[a].Pod.Name < u.Members[b].Pod.Name })
		q := int(quorum[k])
		u.elastic = q > 0 && len(u.Members) > q
		units = append(units, u)
		if u.elastic {
			for _, m := range u.Members {
				units = append(units, Unit{Key: k + "/" + m.Pod.Name, Members: []Candidate{m}, LostWork: m.LostWork,
					Prepared: m.Prepared, Noticed: m.warned(), gang: k, spare: len(u.Members) - q})
			}
		}
	}
	return units
}

// allowed reports whether a set of units may be evicted together: no elastic
// gang both whole and shedding, none shedding more members than it can spare.
func allowed(units []Unit) bool {
	shed := map[string]int{}
	for _, u := range units {
		if u.gang != "" {
			shed[u.gang]++
			if shed[u.gang] > u.spare {
				return false
			}
		}
	}
	if len(shed) == 0 {
		return true
	}
	for _, u := range units {
		if u.gang == "" && shed[u.Key] > 0 {
			return false
		}
	}
	return true
}

// exhaustiveLimit bounds the exact search; a node holds few units in practice.
const exhaustiveLimit = 16

// Choose picks the units to evict so that at least owed GPUs come back on node:
// the set whose pods without a reclaim notice lose the least (Noticed: the
// pods warned are the ones that go, and a pod not warned that would lose
// anything goes only for what they do not free; a noticed unit that would
// take longer to leave than one without a notice counts as not noticed),
// then the least total cost on node (Unit.on), counting
// none for Prepared units (pods that checkpointed after their reclaim notice
// lose nothing they were not warned of, so they go first), then the fewest
// pods, then the fewest units. An elastic gang sheds members rather than going whole when that
// loses less. When no set frees enough, every whole unit that frees something
// on node is chosen. The result is in eviction order: least lost work first.
func Choose(units []Unit, node string, owed int64) []Unit {
	if owed <= 0 {
		return nil
	}
	// Each unit's GPUs on node, once: a gang's members may be many, and the
	// exact search below would otherwise walk them for each of its sets.
	var useful []unitOn
	anyNoticed := false
	for _, u := range units {
		if g, cost := u.on(node); g > 0 {
			useful = append(useful, unitOn{Unit: u, gpus: g, cost: cost, noticed: u.Noticed})
			anyNoticed = anyNoticed || u.Noticed
		}
	}
	if anyNoticed {
		demoteSlowNoticed(useful)
	}
	sort.SliceStable(useful, func(i, j int) bool { return lessUnit(useful[i], useful[j]) })
	if len(useful) <= exhaustiveLimit {
		return cheapestCover(useful, owed)
	}
	// Too many for an exact search: least lost work first until covered. A
	// gang that shed what it could spare may still have to go whole: if
	// shedding leaves GPUs owed, choose among whole units only.
	chosen, freed := greedyCover(useful, owed)
	if freed < owed {
		chosen, _ = greedyCover(slices.DeleteFunc(useful, func(u unitOn) bool { return u.gang != "" }), owed)
	}
	return chosen
}

// unitOn is a unit, the GPUs its members hold on the node being chosen for,
// what evicting it costs there (see Unit.on), and whether its notice puts it
// first (Noticed, and it leaves no later than the units without one).
type unitOn struct {
	Unit
	gpus    int64
	cost    float64
	noticed bool
}

// leaves is how long the unit's members take to go once evicted: the
// longest grace period the reclaimer gives them (Candidate.EvictionGrace).
func (u Unit) leaves() time.Duration {
	var out time.Duration
	for _, m := range u.Members {
		out = max(out, m.EvictionGrace(m.maxGrace))
	}
	return out
}

// demoteSlowNoticed lets a notice put a unit first only where it gives the
// GPUs back no later than every unit without one would: the replica waiting
// for them must not wait longer because the pods it displaces were warned.
// Each unit's leaves is found once (a gang's walks all its members).
func demoteSlowNoticed(useful []unitOn) {
	leaves := make([]time.Duration, len(useful))
	var soonest time.Duration = -1
	for i, u := range useful {
		leaves[i] = u.leaves()
		if !u.Noticed && (soonest < 0 || leaves[i] < soonest) {
			soonest = leaves[i]
		}
	}
	for i := range useful {
		if useful[i].noticed && soonest >= 0 && leaves[i] > soonest {
			useful[i].noticed = false
		}
	}
}

// greedyCover takes units in order while they are allowed together, until
// owed GPUs come back, and returns them and the GPUs they free.
func greedyCover(units []unitOn, owed int64) (chosen []Unit, freed int64) {
	for _, u := range units {
		if freed >= owed {
			break
		}
		if allowed(append(chosen[:len(chosen):len(chosen)], u.Unit)) {
			chosen = append(chosen, u.Unit)
			freed += u.gpus
		}
	}
	return chosen, freed
}

func cheapestCover(units []unitOn, owed int64) []Unit {
	type cost struct {
		unnoticed, lost float64
		pods, units     int
	}
	better := func(a, b cost) bool {
		if a.unnoticed != b.unnoticed {
			return a.unnoticed < b.unnoticed
		}
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
	elastic := slices.ContainsFunc(units, func(u unitOn) bool { return u.gang != "" })
	var set []Unit
	for mask := 1; mask < 1<<len(units); mask++ {
		var freed int64
		var c cost
		set = set[:0]
		for i, u := range units {
			if mask&(1<<i) != 0 {
				freed += u.gpus
				if !u.Prepared {
					c.lost += u.cost
				}
				if !u.noticed {
					c.unnoticed += u.cost
				}
				c.pods += len(u.Members)
				c.units++
				set = append(set, u.Unit)
			}
		}
		if freed >= owed && (!found || better(c, best)) && (!elastic || allowed(set)) {
			bestMask, best, found = mask, c, true
		}
	}
	var chosen []Unit
	for i, u := range units {
		switch {
		case found && bestMask&(1<<i) != 0:
			chosen = append(chosen, u.Unit)
		case !found && u.gang == "":
			// No set frees enough: every whole unit, no member shed.
			chosen = append(chosen, u.Unit)
		}
	}
	return chosen
}

// lessUnit is the eviction order: prepared first, then noticed, then least
// cost on the node (Unit.on), fewest pods, most GPUs back on the node, key.
func lessUnit(a, b unitOn) bool {
	if a.Prepared != b.Prepared {
		return a.Prepared
	}
	if a.noticed != b.noticed {
		return a.noticed
	}
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	if len(a.Members) != len(b.Members) {
		return len(a.Members) < len(b.Members)
	}
	if a.gpus != b.gpus {
		return a.gpus > b.gpus
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
	// Each node looks only at the pods on it and at gang members anywhere
	// (a lone pod elsewhere frees nothing there), in the candidates' order:
	// a fleet has thousands of nodes owing and tens of thousands of pods.
	onNode := map[string][]int{}
	var inGangs []int
	for i, c := range candidates {
		onNode[c.Pod.Spec.NodeName] = append(onNode[c.Pod.Spec.NodeName], i)
		if api.GangKey(c.Pod) != "" {
			inGangs = append(inGangs, i)
		}
	}
	for _, o := range owed {
		left := o.GPUs
		var live []Candidate
		for _, i := range mergeIndices(onNode[o.Node], inGangs) {
			c := candidates[i]
			switch {
			case c.Pod.DeletionTimestamp == nil && !gone[c.Pod]:
				// Only a unit with a member on the node can free GPUs there:
				// a lone pod elsewhere is no use to this node.
				if c.Pod.Spec.NodeName == o.Node || api.GangKey(c.Pod) != "" {
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
		setAside := map[string]bool{}
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
						// Neither this unit nor, for a member it sheds, its gang whole.
						setAside[u.Key], setAside[u.gang] = true, true
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
			// Try again without the units refused and the pods gone: an
			// elastic gang that shed members can spare fewer.
			for _, u := range chosen {
				setAside[u.Key] = true
			}
			units = slices.DeleteFunc(Units(slices.DeleteFunc(slices.Clone(live), func(c Candidate) bool { return gone[c.Pod] })),
				func(u Unit) bool { return setAside[u.Key] })
		}
		if left > 0 {
			stillOwed = append(stillOwed, Owed{Node: o.Node, GPUs: left, Why: o.Why})
		}
	}
	return evicted, stillOwed, errs
}

// mergeIndices merges two ascending index lists into one, each index once.
func mergeIndices(a, b []int) []int {
	if len(b) == 0 {
		return a
	}
	out := make([]int, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || (len(a) > 0 && a[0] < b[0]):
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default: // the same index in both
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	return out
}
