package reclaim

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// member is a running best-effort pod on node, optionally in a gang, that last
// checkpointed ago before now (0: never, so it loses everything since start an hour ago).
func member(name, node, gang string, gpus int64, ago time.Duration) Candidate {
	p := gpuPod(name, gpus, now.Add(-time.Hour))
	p.Namespace = "ml"
	p.Spec.NodeName = node
	if gang != "" {
		p.Labels = map[string]string{api.LabelPodGroup: gang}
	}
	if ago > 0 {
		p.Annotations = map[string]string{api.AnnotationLastCheckpoint: rfc(now.Add(-ago))}
	}
	return NewCandidate(p, api.GPUResource, now, DefaultMaxGrace, nil)
}

// saving is member for a pod that declares its saves take save.
func saving(name, node string, gpus int64, ago, save time.Duration) Candidate {
	c := member(name, node, "", gpus, ago)
	c.Pod.Annotations[api.AnnotationSaveDuration] = save.String()
	return NewCandidate(c.Pod, api.GPUResource, now, DefaultMaxGrace, nil)
}

func noticed(c Candidate) Candidate {
	c.Noticed = true
	return c
}

func prepared(c Candidate) Candidate {
	c.Prepared = true
	return c
}

// quorum makes c a member of an elastic gang that needs q members.
func quorum(q int32, cs ...Candidate) []Candidate {
	for i := range cs {
		cs[i].Quorum = q
	}
	return cs
}

func unitKeys(us []Unit) []string {
	out := []string{}
	for _, u := range us {
		out = append(out, u.Key)
	}
	return out
}

func TestChooseVictims(t *testing.T) {
	gangKey := "ml/" + api.LabelPodGroup + "="
	tests := []struct {
		name       string
		candidates []Candidate
		owed       int64
		want       []string
	}{
		{
			name: "least lost work first: the fresh checkpoint goes",
			candidates: []Candidate{
				member("old", "n1", "", 4, 0),                 // an hour lost
				member("fresh", "n1", "", 4, 2*time.Minute),   // two minutes lost
				member("middle", "n1", "", 4, 20*time.Minute), //
			},
			owed: 4,
			want: []string{"ml/fresh"},
		},
		{
			name: "a pod that checkpointed after its notice goes before one that lost less",
			candidates: []Candidate{
				member("fresh", "n1", "", 4, 2*time.Minute), // two minutes lost, not noticed
				prepared(member("warned", "n1", "", 4, 5*time.Minute)),
			},
			owed: 4,
			want: []string{"ml/warned"},
		},
		{
			name: "a pod given a notice goes before one not warned that lost less",
			candidates: []Candidate{
				member("fresh", "n1", "", 4, 2*time.Minute), // started two minutes ago, never warned
				noticed(member("warned", "n1", "", 4, 5*time.Minute)),
			},
			owed: 4,
			want: []string{"ml/warned"},
		},
		{
			name: "a noticed pod that would hold its GPUs longer does not go before one without a notice",
			candidates: []Candidate{
				saving("quick", "n1", 4, 2*time.Minute, 2*time.Second), // leaves in 12 s
				noticed(member("warned", "n1", "", 4, 5*time.Minute)),  // its whole 30 s
			},
			owed: 4,
			want: []string{"ml/quick"},
		},
		{
			name: "a noticed pod that leaves as soon as one without a notice goes first",
			candidates: []Candidate{
				saving("quick", "n1", 4, 2*time.Minute, 2*time.Second),
				noticed(saving("warned", "n1", 4, 5*time.Minute, time.Second)), // leaves in 11 s
			},
			owed: 4,
			want: []string{"ml/warned"},
		},
		{
			name: "pods not warned go only for what the noticed ones do not free, the cheapest of them",
			candidates: []Candidate{
				member("fresh", "n1", "", 2, 2*time.Minute),
				member("older", "n1", "", 2, 5*time.Minute),
				noticed(member("warned", "n1", "", 2, 9*time.Minute)),
			},
			owed: 4,
			want: []string{"ml/warned", "ml/fresh"},
		},
		{
			name: "one pod with more lost work beats two whose sum is larger",
			candidates: []Candidate{
				member("small-a", "n1", "", 2, 10*time.Minute), // 2 x 600 = 1200
				member("small-b", "n1", "", 2, 10*time.Minute), // 1200
				member("big", "n1", "", 4, 8*time.Minute),      // 4 x 480 = 1920 < 2400
			},
			owed: 4,
			want: []string{"ml/big"},
		},
		{
			name: "two pods whose sum of lost work is smaller beat one",
			candidates: []Candidate{
				member("small-a", "n1", "", 2, 5*time.Minute), // 2 x 300 = 600
				member("small-b", "n1", "", 2, 5*time.Minute), // 600
				member("big", "n1", "", 4, 8*time.Minute),     // 4 x 480 = 1920 > 1200
			},
			owed: 4,
			want: []string{"ml/small-a", "ml/small-b"},
		},
		{
			name: "equal lost work: fewest pods",
			candidates: []Candidate{
				member("a", "n1", "", 2, 10*time.Minute), // 1200
				member("b", "n1", "", 2, 10*time.Minute), // 1200
				member("c", "n1", "", 4, 10*time.Minute), // 2400
			},
			owed: 4,
			want: []string{"ml/c"},
		},
		{
			name: "a gang goes whole, members on other nodes too, and costs what its member on the node loses",
			candidates: []Candidate{
				member("g-0", "n1", "train", 2, 5*time.Minute), // 600
				member("g-1", "n2", "train", 2, 5*time.Minute), // 600 elsewhere: the gang's own claim
				member("solo", "n1", "", 2, 8*time.Minute),     // 960
			},
			owed: 2,
			want: []string{gangKey + "train"},
		},
		{
			// A tenant puts its pods across the cluster in one PodGroup whose
			// minMember is the member count: summed, the gang's lost work
			// (8 x 1200) would make another tenant's pod go first.
			name: "a gang over many nodes does not make another tenant's pod go first",
			candidates: append([]Candidate{
				member("shield-0", "n1", "shield", 2, 10*time.Minute), // 1200 on n1
				member("victim", "n1", "", 2, 15*time.Minute)},        // 1800
				member("shield-1", "n2", "shield", 2, 10*time.Minute),
				member("shield-2", "n3", "shield", 2, 10*time.Minute),
				member("shield-3", "n4", "shield", 2, 10*time.Minute),
				member("shield-4", "n5", "shield", 2, 10*time.Minute),
				member("shield-5", "n6", "shield", 2, 10*time.Minute),
				member("shield-6", "n7", "shield", 2, 10*time.Minute),
				member("shield-7", "n8", "shield", 2, 10*time.Minute)),
			owed: 2,
			want: []string{gangKey + "shield"},
		},
		{
			name: "two members of a gang on the node cost what the cheaper loses",
			candidates: []Candidate{
				member("g-0", "n1", "pair", 1, 10*time.Minute), // 600
				member("g-1", "n1", "pair", 1, 10*time.Minute), // 600
				member("solo", "n1", "", 1, 15*time.Minute),    // 900: alone, either member would go before it
			},
			owed: 1,
			want: []string{gangKey + "pair"},
		},
		{
			name: "a cheap gang is taken whole even if one member would do",
			candidates: []Candidate{
				member("g-0", "n1", "eval", 2, time.Minute),
				member("g-1", "n1", "eval", 2, time.Minute),
				member("g-2", "n2", "eval", 2, time.Minute), // gang: 360
				member("solo", "n1", "", 2, 30*time.Minute),
			},
			owed: 2,
			want: []string{gangKey + "eval"},
		},
		{
			name: "a gang noticed through one member goes before a pod not warned, whatever members it adds",
			candidates: []Candidate{
				noticed(member("g-0", "n1", "train", 2, 30*time.Minute)),
				member("g-1", "n2", "train", 2, 0), // joined since: no notice of its own
				member("solo", "n1", "", 2, time.Minute),
			},
			owed: 2,
			want: []string{gangKey + "train"},
		},
		{
			name: "an elastic gang sheds its members on the node, least lost work first, and keeps running",
			candidates: append(quorum(2,
				member("e-0", "n1", "elastic", 2, 20*time.Minute), // 2400
				member("e-1", "n1", "elastic", 2, 10*time.Minute), // 1200
				member("e-2", "n2", "elastic", 2, time.Minute),
				member("e-3", "n2", "elastic", 2, time.Minute)),
				member("solo", "n1", "", 2, 15*time.Minute)), // 1800
			owed: 4,
			want: []string{gangKey + "elastic/e-1", "ml/solo"},
		},
		{
			name: "an elastic gang sheds no more than down to its quorum",
			candidates: quorum(3,
				member("e-0", "n1", "elastic", 2, time.Minute),
				member("e-1", "n1", "elastic", 2, time.Minute),
				member("e-2", "n2", "elastic", 2, time.Minute),
				member("e-3", "n2", "elastic", 2, time.Minute)),
			owed: 4,
			want: []string{gangKey + "elastic"},
		},
		{
			name: "members above the quorum go before the gang whole, even where the gang is cheap",
			candidates: quorum(2,
				member("e-0", "n1", "elastic", 2, time.Minute),
				member("e-1", "n1", "elastic", 2, time.Minute),
				member("e-2", "n2", "elastic", 2, time.Minute),
				member("e-3", "n2", "elastic", 2, time.Minute)),
			owed: 4,
			want: []string{gangKey + "elastic/e-0", gangKey + "elastic/e-1"},
		},
		{
			name: "members that disagree on the quorum make the gang rigid",
			candidates: append(quorum(2,
				member("e-0", "n1", "elastic", 2, time.Minute),
				member("e-1", "n2", "elastic", 2, time.Minute)),
				member("e-2", "n2", "elastic", 2, time.Minute)),
			owed: 2,
			want: []string{gangKey + "elastic"},
		},
		{
			name: "not enough on the node: everything that frees GPUs there",
			candidates: []Candidate{
				member("a", "n1", "", 2, time.Minute),
				member("elsewhere", "n2", "", 8, time.Minute),
			},
			owed: 4,
			want: []string{"ml/a"},
		},
		{
			name:       "nothing owed, nothing chosen",
			candidates: []Candidate{member("a", "n1", "", 2, time.Minute)},
			owed:       0,
			want:       []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := unitKeys(Choose(Units(tt.candidates), "n1", tt.owed))
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("chose %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUnitsSkipTerminatingAndGroupByNamespace(t *testing.T) {
	a := member("g-0", "n1", "train", 2, time.Minute)
	b := member("g-1", "n1", "train", 2, time.Minute)
	b.Pod.DeletionTimestamp = &metaNow
	other := member("g-0", "n1", "train", 2, time.Minute)
	other.Pod.Namespace = "other"
	units := Units([]Candidate{a, b, other})
	if len(units) != 2 || len(units[0].Members) != 1 || len(units[1].Members) != 1 {
		t.Fatalf("units %+v: want two one-member gangs (the terminating member left out, namespaces apart)", unitKeys(units))
	}
}

// A gang member evicted for one node is on its way out everywhere: the next
// node counts its GPUs as coming back and evicts nothing more for them.
func TestTakeCountsAGangEvictedForOneNodeOnTheNext(t *testing.T) {
	cands := []Candidate{
		member("g-0", "n1", "train", 2, time.Minute),
		member("g-1", "n2", "train", 2, time.Minute),
		member("lone", "n2", "", 2, 0),
	}
	var tried []string
	evicted, stillOwed, errs := Take([]Owed{{Node: "n1", GPUs: 2}, {Node: "n2", GPUs: 2}}, cands, func(m Candidate, _ Owed) error {
		tried = append(tried, m.Pod.Name)
		return nil
	})
	if want := []string{"g-0", "g-1"}; !reflect.DeepEqual(tried, want) || len(evicted) != 2 || len(stillOwed) != 0 || len(errs) != 0 {
		t.Fatalf("evictions %v (evicted %d, still owed %v, errs %v), want %v: n2's GPUs come back with the gang", tried, len(evicted), stillOwed, errs, want)
	}
}

// An elastic gang that shed a member for one node can spare one fewer for
// the next; past its quorum it goes whole. A refused member is not shed again
// and keeps the gang from going whole.
func TestTakeShedsElasticGangsDownToTheirQuorum(t *testing.T) {
	gang := func() []Candidate {
		return quorum(2,
			member("e-0", "n1", "elastic", 2, time.Minute),
			member("e-1", "n2", "elastic", 2, time.Minute),
			member("e-2", "n3", "elastic", 2, time.Minute),
			member("e-3", "n3", "elastic", 2, time.Minute))
	}
	for _, tt := range []struct {
		name    string
		owed    []Owed
		refuse  string
		want    []string
		stillOn []string
	}{
		{name: "two nodes, one member each", owed: []Owed{{Node: "n1", GPUs: 2}, {Node: "n2", GPUs: 2}}, want: []string{"e-0", "e-1"}},
		{name: "a third node takes the gang whole", owed: []Owed{{Node: "n1", GPUs: 2}, {Node: "n2", GPUs: 2}, {Node: "n3", GPUs: 2}},
			want: []string{"e-0", "e-1", "e-2", "e-3"}},
		{name: "a refused member stays, and so does its gang", owed: []Owed{{Node: "n3", GPUs: 4}}, refuse: "e-2",
			want: []string{"e-2", "e-3"}, stillOn: []string{"n3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var tried []string
			_, stillOwed, _ := Take(tt.owed, gang(), func(m Candidate, _ Owed) error {
				tried = append(tried, m.Pod.Name)
				if m.Pod.Name == tt.refuse {
					return errors.New("refused")
				}
				return nil
			})
			var still []string
			for _, o := range stillOwed {
				still = append(still, o.Node)
			}
			if !reflect.DeepEqual(tried, tt.want) || !reflect.DeepEqual(still, tt.stillOn) {
				t.Fatalf("evictions tried %v, still owed on %v; want %v and %v", tried, still, tt.want, tt.stillOn)
			}
		})
	}
}

var metaNow = metav1.NewTime(now)

// A pod terminating past its capped grace period is not returning its GPUs:
// they are owed, and another pod is evicted for them.
func TestTakeCountsOverduePodsAsOwed(t *testing.T) {
	stuck := member("stuck", "n1", "", 4, time.Hour)
	stuck.Pod.DeletionTimestamp = &metav1.Time{Time: now.Add(-10 * time.Minute)}
	stuck.Overdue = true
	leaving := member("leaving", "n1", "", 4, time.Hour)
	leaving.Pod.DeletionTimestamp = &metav1.Time{Time: now.Add(20 * time.Second)}
	other := member("other", "n1", "", 4, time.Minute)
	var tried []string
	_, stillOwed, _ := Take([]Owed{{Node: "n1", GPUs: 8}}, []Candidate{stuck, leaving, other}, func(m Candidate, _ Owed) error {
		tried = append(tried, m.Pod.Name)
		return nil
	})
	if want := []string{"other"}; !reflect.DeepEqual(tried, want) || len(stillOwed) != 0 {
		t.Fatalf("evicted %v, still owed %v; want %v: leaving's 4 GPUs come back, stuck's do not", tried, stillOwed, want)
	}
}

// Past the exact search's limit, an elastic gang that sheds all it can spare
// and still leaves GPUs owed goes whole instead.
func TestChooseGreedyTakesAnElasticGangWholeWhenSheddingFallsShort(t *testing.T) {
	var cands []Candidate
	for i := range 9 {
		cands = append(cands, quorum(7, member(fmt.Sprintf("g-%d", i), "n1", "wide", 1, time.Minute))...)
	}
	for i := range 7 {
		cands = append(cands, member(fmt.Sprintf("lone-%d", i), "n1", "", 1, 0)) // an hour lost each
	}
	chosen := Choose(Units(cands), "n1", 10)
	var freed int64
	for _, u := range chosen {
		freed += u.GPUsOn("n1")
	}
	if keys := unitKeys(chosen); freed < 10 || keys[0] != "ml/"+api.LabelPodGroup+"=wide" {
		t.Fatalf("chose %v freeing %d of 10: want the gang whole first, then one lone pod", keys, freed)
	}
}

// BenchmarkTakeLargeElasticGang takes 15 GPUs back from a node holding 15
// one-GPU members of an elastic gang whose other 20,000 members, a tenant's
// to create, hold no GPU anywhere: the exact search over the 16 units useful
// on the node (each member and the gang whole) must not walk the gang's
// members for each of its 65,535 sets.
func BenchmarkTakeLargeElasticGang(b *testing.B) {
	var gang []Candidate
	for i := range 15 {
		gang = append(gang, member(fmt.Sprintf("on-%d", i), "n1", "huge", 1, 0))
	}
	for i := range 20_000 {
		gang = append(gang, member(fmt.Sprintf("off-%d", i), fmt.Sprintf("cpu-%d", i%100), "huge", 0, 0))
	}
	gang = quorum(2, gang...)
	owed := []Owed{{Node: "n1", GPUs: 15, Why: "inference"}}
	b.ReportAllocs()
	for b.Loop() {
		evicted, left, errs := Take(owed, gang, func(Candidate, Owed) error { return nil })
		if len(left) != 0 || len(errs) != 0 || len(evicted) == 0 {
			b.Fatalf("evicted %d, still owed %v, errors %v", len(evicted), left, errs)
		}
	}
}

// native makes c a member of the native PodGroup group (spec.schedulingGroup).
func native(group string, c Candidate) Candidate {
	c.Pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
	return c
}

// Members of a native PodGroup are a gang as scheduler-plugins members are:
// taken whole, or shed down to their quorum (minCount). A native group and a
// scheduler-plugins group of one name are two gangs, and a pod that names
// both is a member of its native group only.
func TestTakeTreatsNativePodGroupsAsGangs(t *testing.T) {
	rigid := []Candidate{
		native("train", member("n-0", "n1", "", 2, time.Minute)),
		native("train", member("n-1", "n2", "", 2, time.Minute)),
		member("x-0", "n2", "train", 2, time.Minute), // the scheduler-plugins group "train"
		native("train", member("both", "n3", "train", 2, time.Minute)),
	}
	var tried []string
	_, stillOwed, _ := Take([]Owed{{Node: "n1", GPUs: 2}}, rigid, func(m Candidate, _ Owed) error {
		tried = append(tried, m.Pod.Name)
		return nil
	})
	if want := []string{"both", "n-0", "n-1"}; !reflect.DeepEqual(tried, want) || len(stillOwed) != 0 {
		t.Fatalf("evictions %v (still owed %v), want the native gang whole %v", tried, stillOwed, want)
	}

	elastic := quorum(2,
		native("train", member("e-0", "n1", "", 2, time.Minute)),
		native("train", member("e-1", "n2", "", 2, time.Minute)),
		native("train", member("e-2", "n3", "", 2, time.Minute)))
	tried = nil
	if _, _, _ = Take([]Owed{{Node: "n1", GPUs: 2}}, elastic, func(m Candidate, _ Owed) error {
		tried = append(tried, m.Pod.Name)
		return nil
	}); !reflect.DeepEqual(tried, []string{"e-0"}) {
		t.Fatalf("evictions %v, want [e-0]: a native gang above its minCount sheds a member", tried)
	}
}
