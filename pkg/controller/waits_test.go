package controller

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// scheduled is an inference pod of service, created at created and
// scheduled on node at at (a zero at: pending).
func scheduled(namespace, name, service, node string, created, at time.Time) *v1.Pod {
	p := testobj.Inference(namespace, name, service, node, 4)
	p.CreationTimestamp = metav1.NewTime(created)
	if !at.IsZero() {
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	} else {
		p.Status.Phase = v1.PodPending
	}
	return p
}

// Each service's waits to be scheduled are exported beside the reclaim
// budget, counted over it, kept in its namespace's report with the replicas
// pending, and removed with the service.
func TestSyncExportsPerServiceWaits(t *testing.T) {
	tc := newTestCluster(t, Config{SyncPeriod: 5 * time.Second})
	budget := 5*time.Second + reclaim.DefaultMaxGrace + ReclaimBudgetSlack
	if got := tc.c.cfg.ReclaimBudget(); got != budget {
		t.Fatalf("reclaim budget %v, want the sync period + the grace cap + %v = %v", got, ReclaimBudgetSlack, budget)
	}
	deploy := testobj.Deployment("serving", "summarize", 2, 4, nil)
	// summarize-0 was scheduled before the controller started: history.
	old := scheduled("serving", "summarize-0", "summarize", "a", t0.Add(-time.Hour), t0.Add(-time.Hour))
	pending := scheduled("serving", "summarize-1", "summarize", "", t0.Add(-2*time.Second), time.Time{})
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8), old, pending, deploy)
	tc.load.loads = []vllm.PodLoad{
		fresh("serving", "summarize", 1, 0, 4),
		{Namespace: "serving", Name: "summarize-1", Service: "summarize", GPUs: 4, Created: t0.Add(-2 * time.Second)},
	}
	if _, err := tc.sync(t, t0); err != nil {
		t.Fatal(err)
	}
	value := func(get func() (float64, error)) float64 {
		t.Helper()
		v, err := get()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	longest := func() float64 {
		return value(func() (float64, error) {
			return testutil.GetGaugeMetricValue(serviceWaitLongest.WithLabelValues("serving", "summarize"))
		})
	}
	over := func() float64 {
		return value(func() (float64, error) {
			return testutil.GetCounterMetricValue(serviceWaitsOverBudget.WithLabelValues("serving", "summarize"))
		})
	}
	if p := value(func() (float64, error) {
		return testutil.GetGaugeMetricValue(serviceReplicas.WithLabelValues("serving", "summarize", "pending"))
	}); p != 1 || longest() != 0 || over() != 0 {
		t.Errorf("before any wait: pending %g, longest %g, over budget %g; want 1, 0, 0", p, longest(), over())
	}
	if b := value(func() (float64, error) { return testutil.GetGaugeMetricValue(reclaimBudget) }); b != budget.Seconds() {
		t.Errorf("gleaner_reclaim_budget_seconds %g, want %g", b, budget.Seconds())
	}
	waits := func(name string, labels map[string]string) uint64 {
		t.Helper()
		h, err := testutil.GetHistogramVecFromGatherer(legacyregistry.DefaultGatherer, name, labels)
		if err != nil {
			t.Fatal(err)
		}
		return h.GetAggregatedSampleCount()
	}
	poolBefore := waits(inferenceWait.FQName(), nil)

	// summarize-1 is scheduled 5 s after it was created, summarize-2 (never
	// seen pending) after 200 s, over the budget; a tenant's pod labelled
	// inference counts in the pool's histogram only.
	bound := scheduled("serving", "summarize-1", "summarize", "b", t0.Add(-2*time.Second), t0.Add(3*time.Second))
	late := scheduled("serving", "summarize-2", "summarize", "b", t0.Add(-196*time.Second), t0.Add(4*time.Second))
	tenant := scheduled("research", "fake-0", "fake", "a", t0, t0.Add(time.Second))
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8), old, bound, late, tenant, deploy)
	tc.load.loads = []vllm.PodLoad{fresh("serving", "summarize", 1, 0, 4), fresh("serving", "summarize", 1, 0, 4), fresh("serving", "summarize", 1, 0, 4)}
	if _, err := tc.sync(t, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	count := waits(serviceWait.FQName(), map[string]string{"namespace": "serving", "service": "summarize"})
	poolAfter := waits(inferenceWait.FQName(), nil)
	if count != 2 || over() != 1 || longest() != 200 || poolAfter-poolBefore != 3 {
		t.Errorf("waits %d, over budget %g, longest %g s, pool's waits +%d; want 2, 1, 200 s, +3", count, over(), longest(), poolAfter-poolBefore)
	}
	st, _ := tc.c.ledger.Report("serving", t0, nil)
	if len(st.Services) != 1 || st.ReclaimBudgetMilliseconds != budget.Milliseconds() {
		t.Fatalf("serving's report: %+v", st)
	}
	if s := st.Services[0]; s.Name != "summarize" || s.Replicas != 3 || s.Pending != 0 || s.Waits.Scheduled != 2 || s.Waits.OverBudget != 1 ||
		s.Waits.LongestMilliseconds != 200000 || s.Waits.LongestPod != "summarize-2" || len(s.Daily) != 1 {
		t.Errorf("summarize in serving's report: %+v", s)
	}
	if st, _ := tc.c.ledger.Report("research", t0, nil); len(st.Services) != 0 {
		t.Errorf("a tenant's namespace has services: %+v", st.Services)
	}

	// Ten minutes on, the longest recent wait is none.
	if _, err := tc.sync(t, t0.Add(5*time.Second+longestWaitWindow+time.Second)); err != nil {
		t.Fatal(err)
	}
	if longest() != 0 {
		t.Errorf("longest wait %g s with none in the last %v", longest(), longestWaitWindow)
	}

	// The service goes: its series go with it.
	tc.set(t, testobj.Node("a", 8), testobj.Node("b", 8))
	tc.load.loads = nil
	if _, err := tc.sync(t, t0.Add(20*time.Minute)); err != nil {
		t.Fatal(err)
	}
	noSeriesFor(t, "summarize")
	if st, _ := tc.c.ledger.Report("serving", t0, nil); len(st.Services) != 0 {
		t.Errorf("the deleted service is still in serving's report: %+v", st.Services)
	}
}

// Past maxWaitSeries services, a service gets no wait series.
func TestWaitSeriesAreBounded(t *testing.T) {
	w := newServiceWaits()
	ctx := t.Context()
	for i := range maxWaitSeries {
		w.series[fmt.Sprintf("ns/s%d", i)] = nil
	}
	if w.start(ctx, "ns/one-more") || len(w.series) != maxWaitSeries {
		t.Errorf("%d services with series, want at most %d", len(w.series), maxWaitSeries)
	}
	w.observe("ns/one-more", t0, time.Hour, time.Minute) // nothing to record it in
	if _, ok := w.series["ns/one-more"]; ok {
		t.Error("a service past the bound got series")
	}
}
