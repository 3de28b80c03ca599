package ledger

import (
	"slices"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// A namespace opted in as inference has its services' scheduling waits in
// its report, so that the service's owner can read, with no access to the
// controller's metrics, how long each replica waited for GPUs against the
// reclaim budget. Services are the controller's (the planning round's); the
// ledger keeps the first MaxServices of a namespace by name, and forgets a
// service that is gone, as the controller drops its metrics.

// ServiceNow is an inference service as one round sees it.
type ServiceNow struct {
	Namespace, Name string
	// Replicas counts its inference pods; Pending those not yet scheduled,
	// the oldest created at PendingSince (zero for none).
	Replicas, Pending int32
	PendingSince      time.Time
}

// Services records the inference services of a round, and the reclaim
// budget their waits are judged by. A service the ledger holds that is not
// among them is forgotten.
func (l *Ledger) Services(now time.Time, services []ServiceNow, budget time.Duration) {
	byNS := map[string][]ServiceNow{}
	for _, s := range services {
		byNS[s.Namespace] = append(byNS[s.Namespace], s)
	}
	for name, n := range l.namespaces {
		if _, ok := byNS[name]; !ok && len(n.services) > 0 {
			n.services, n.status.ServicesTruncated, n.status.ReclaimBudgetMilliseconds = nil, false, 0
			n.changed = true
		}
	}
	for ns, list := range byNS {
		sort.Slice(list, func(a, b int) bool { return list[a].Name < list[b].Name })
		n := l.ns(ns)
		truncated := len(list) > v1alpha1.MaxServices
		list = list[:min(len(list), v1alpha1.MaxServices)]
		kept := make(map[string]*v1alpha1.ServiceWaits, len(list))
		for _, s := range list {
			w := n.services[s.Name]
			if w == nil {
				w = &v1alpha1.ServiceWaits{Name: s.Name, Since: metav1.NewTime(now)}
				n.changed = true
			}
			var since *metav1.Time
			if s.Pending > 0 && !s.PendingSince.IsZero() {
				t := metav1.NewTime(s.PendingSince)
				since = &t
			}
			if w.Replicas != s.Replicas || w.Pending != s.Pending || !sameTime(w.PendingSince, since) {
				w.Replicas, w.Pending, w.PendingSince = s.Replicas, s.Pending, since
				n.changed = true
			}
			kept[s.Name] = w
		}
		if len(kept) != len(n.services) {
			n.changed = true // a service gone
		}
		n.services = kept
		ms := budget.Milliseconds()
		if truncated != n.status.ServicesTruncated || ms != n.status.ReclaimBudgetMilliseconds {
			n.status.ServicesTruncated, n.status.ReclaimBudgetMilliseconds = truncated, ms
			n.changed = true
		}
	}
}

// Waited records that an inference pod of a service the ledger holds was
// scheduled at after waiting wait, and whether that is over budget.
func (l *Ledger) Waited(ns, service, pod string, at time.Time, wait, budget time.Duration) {
	n := l.namespaces[ns]
	if n == nil || n.services[service] == nil {
		return
	}
	w := n.services[service]
	record := func(c *v1alpha1.WaitCounts) {
		c.Scheduled++
		if wait > budget {
			c.OverBudget++
		}
		if ms := wait.Milliseconds(); ms > c.LongestMilliseconds || c.LongestPod == "" {
			t := metav1.NewTime(at)
			c.LongestMilliseconds, c.LongestPod, c.LongestAt = ms, pod, &t
		}
	}
	record(&w.Waits)
	date := at.UTC().Format(time.DateOnly)
	i := slices.IndexFunc(w.Daily, func(d v1alpha1.DailyWaits) bool { return d.Date == date })
	if i < 0 {
		w.Daily = append(w.Daily, v1alpha1.DailyWaits{Date: date})
		sort.Slice(w.Daily, func(a, b int) bool { return w.Daily[a].Date < w.Daily[b].Date })
		i = slices.IndexFunc(w.Daily, func(d v1alpha1.DailyWaits) bool { return d.Date == date })
	}
	record(&w.Daily[i].WaitCounts)
	if k := len(w.Daily); k > v1alpha1.MaxDays {
		w.Daily = slices.Delete(w.Daily, 0, k-v1alpha1.MaxDays)
	}
	n.changed = true
}

// restoreServices takes back a published report's services (after a
// restart), adding what was counted since to what it says.
func (n *namespace) restoreServices(st v1alpha1.HarvestReportStatus) {
	if n.services == nil && len(st.Services) > 0 {
		n.services = map[string]*v1alpha1.ServiceWaits{}
	}
	if n.status.ReclaimBudgetMilliseconds == 0 {
		n.status.ReclaimBudgetMilliseconds = st.ReclaimBudgetMilliseconds
	}
	n.status.ServicesTruncated = n.status.ServicesTruncated || st.ServicesTruncated
	for _, stored := range st.Services {
		w := n.services[stored.Name]
		if w == nil {
			if len(n.services) >= v1alpha1.MaxServices {
				continue
			}
			s := stored
			s.Daily = slices.Clone(stored.Daily)
			n.services[stored.Name] = &s
			continue
		}
		if stored.Since.Before(&w.Since) {
			w.Since = stored.Since
		}
		addWaits(&w.Waits, stored.Waits)
		for _, d := range stored.Daily {
			i := slices.IndexFunc(w.Daily, func(o v1alpha1.DailyWaits) bool { return o.Date == d.Date })
			if i < 0 {
				w.Daily = append(w.Daily, d)
			} else {
				addWaits(&w.Daily[i].WaitCounts, d.WaitCounts)
			}
		}
		sort.Slice(w.Daily, func(a, b int) bool { return w.Daily[a].Date < w.Daily[b].Date })
		if k := len(w.Daily); k > v1alpha1.MaxDays {
			w.Daily = slices.Delete(w.Daily, 0, k-v1alpha1.MaxDays)
		}
	}
}

// addWaits adds b's counts to a's, keeping the longer wait of the two.
func addWaits(a *v1alpha1.WaitCounts, b v1alpha1.WaitCounts) {
	a.Scheduled += max(0, b.Scheduled)
	a.OverBudget += max(0, b.OverBudget)
	if b.LongestMilliseconds > a.LongestMilliseconds || a.LongestPod == "" && b.LongestPod != "" {
		a.LongestMilliseconds, a.LongestPod, a.LongestAt = b.LongestMilliseconds, b.LongestPod, b.LongestAt
	}
}

// reportServices are a namespace's services as published, by name.
func (n *namespace) reportServices() []v1alpha1.ServiceWaits {
	if len(n.services) == 0 {
		return nil
	}
	out := make([]v1alpha1.ServiceWaits, 0, len(n.services))
	for _, w := range n.services {
		s := *w
		s.Daily = slices.Clone(w.Daily)
		out = append(out, s)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

func sameTime(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}
