package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// An inference namespace's report counts each service's scheduled replicas,
// those over budget and the longest wait, in all and per day; it follows the
// replicas pending now, and forgets a service that is gone.
func TestLedgerKeepsServiceWaits(t *testing.T) {
	l := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	budget := 130 * time.Second
	chat := func(replicas, pending int32, since time.Time) []ServiceNow {
		return []ServiceNow{
			{Namespace: "serving", Name: "chat", Replicas: replicas, Pending: pending, PendingSince: since},
			{Namespace: "serving", Name: "summarize", Replicas: 1},
		}
	}
	l.Services(t0, chat(2, 1, t0.Add(-time.Second)), budget)
	st, changed := l.Report("serving", t0, nil)
	if !changed || len(st.Services) != 2 || st.ReclaimBudgetMilliseconds != 130000 {
		t.Fatalf("first round: changed %v, %+v", changed, st)
	}
	if c := st.Services[0]; c.Name != "chat" || c.Replicas != 2 || c.Pending != 1 || !c.PendingSince.Time.Equal(t0.Add(-time.Second)) || !c.Since.Time.Equal(t0) {
		t.Errorf("chat: %+v", c)
	}
	l.Published("serving")
	l.Services(t0, chat(2, 1, t0.Add(-time.Second)), budget)
	if _, changed := l.Report("serving", t0, nil); changed {
		t.Error("an unchanged round changed the report")
	}

	l.Waited("serving", "chat", "chat-1", t0.Add(5*time.Second), 6*time.Second, budget)
	l.Waited("serving", "chat", "chat-2", t0.Add(24*time.Hour), 140*time.Second, budget)
	l.Waited("serving", "chat", "chat-3", t0.Add(25*time.Hour), 2*time.Second, budget)
	l.Waited("serving", "nobody", "x", t0, time.Hour, budget) // not a service it holds
	l.Services(t0.Add(25*time.Hour), chat(3, 0, time.Time{}), budget)
	st, changed = l.Report("serving", t0.Add(25*time.Hour), nil)
	c := st.Services[0]
	if !changed || c.Pending != 0 || c.PendingSince != nil || c.Replicas != 3 {
		t.Errorf("pending gone: changed %v, %+v", changed, c)
	}
	w := c.Waits
	if w.Scheduled != 3 || w.OverBudget != 1 || w.LongestMilliseconds != 140000 || w.LongestPod != "chat-2" || !w.LongestAt.Time.Equal(t0.Add(24*time.Hour)) {
		t.Errorf("waits in all: %+v", w)
	}
	if len(c.Daily) != 2 || c.Daily[0].Date != "2026-03-02" || c.Daily[0].Scheduled != 1 || c.Daily[1].Scheduled != 2 || c.Daily[1].OverBudget != 1 || c.Daily[1].LongestPod != "chat-2" {
		t.Errorf("daily: %+v", c.Daily)
	}
	if len(st.Services) != 2 || st.Services[1].Waits.Scheduled != 0 {
		t.Errorf("summarize: %+v", st.Services)
	}

	// summarize is gone: its waits go with it; the namespace opted out, every service.
	l.Services(t0.Add(25*time.Hour), chat(3, 0, time.Time{})[:1], budget)
	if st, _ := l.Report("serving", t0, nil); len(st.Services) != 1 {
		t.Errorf("summarize gone, yet %+v", st.Services)
	}
	l.Services(t0.Add(25*time.Hour), nil, budget)
	if st, _ := l.Report("serving", t0, nil); len(st.Services) != 0 || st.ReclaimBudgetMilliseconds != 0 {
		t.Errorf("no services, yet %+v", st)
	}
}

// A restarted controller adds its published waits to what it counted since.
func TestLedgerRestoresServiceWaits(t *testing.T) {
	budget := 10 * time.Second
	a := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	a.Services(t0, []ServiceNow{{Namespace: "serving", Name: "chat", Replicas: 1}}, budget)
	a.Waited("serving", "chat", "chat-1", t0, 12*time.Second, budget)
	published, _ := a.Report("serving", t0, nil)

	b := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	later := t0.Add(time.Hour)
	b.Services(later, []ServiceNow{{Namespace: "serving", Name: "chat", Replicas: 2}}, budget)
	b.Waited("serving", "chat", "chat-2", later, 3*time.Second, budget)
	b.Restore("serving", published)
	st, _ := b.Report("serving", later, nil)
	if len(st.Services) != 1 {
		t.Fatalf("%+v", st.Services)
	}
	c := st.Services[0]
	if !c.Since.Time.Equal(t0) || c.Replicas != 2 || c.Waits.Scheduled != 2 || c.Waits.OverBudget != 1 || c.Waits.LongestPod != "chat-1" ||
		len(c.Daily) != 1 || c.Daily[0].Scheduled != 2 {
		t.Errorf("restored: %+v", c)
	}
}

// A namespace's report holds at most MaxServices services, the first by name.
func TestLedgerBoundsServices(t *testing.T) {
	l := &Ledger{Threshold: api.DefaultBestEffortPriorityThreshold, GPUResource: api.GPUResource}
	var services []ServiceNow
	for i := range v1alpha1.MaxServices + 5 {
		services = append(services, ServiceNow{Namespace: "serving", Name: fmt.Sprintf("svc-%03d", i)})
	}
	l.Services(t0, services, time.Minute)
	st, _ := l.Report("serving", t0, nil)
	if len(st.Services) != v1alpha1.MaxServices || !st.ServicesTruncated || st.Services[0].Name != "svc-000" {
		t.Errorf("%d services, truncated %v", len(st.Services), st.ServicesTruncated)
	}
	for i := range v1alpha1.MaxDays + 3 {
		l.Waited("serving", "svc-000", "p", t0.Add(time.Duration(i)*24*time.Hour), time.Second, time.Minute)
	}
	st, _ = l.Report("serving", t0, nil)
	if d := st.Services[0].Daily; len(d) != v1alpha1.MaxDays || st.Services[0].Waits.Scheduled != int64(v1alpha1.MaxDays+3) {
		t.Errorf("%d days kept, %d scheduled", len(d), st.Services[0].Waits.Scheduled)
	}
}
