package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/gleaner-dev/gleaner/pkg/ledger"
)

const (
	// longestWaitWindow is how far back gleaner_service_scheduling_wait_longest_seconds
	// looks: a gauge that holds each wait this long is seen by any scrape
	// interval up to it, so max_over_time over a range misses none.
	longestWaitWindow = 10 * time.Minute
	// maxWaitSeries bounds the services with wait series (a histogram, a
	// counter and a gauge each). Services come only from namespaces the admin
	// opted in; past the bound, a service's waits are still in the pool's
	// histogram and its namespace's HarvestReport.
	maxWaitSeries = 1000
)

// serviceWaits keeps the per-service wait metrics between rounds: which
// services have series, and each one's waits of the last longestWaitWindow.
// Touched only by Sync.
type serviceWaits struct {
	series map[string][]recentWait
	capped bool // said once that maxWaitSeries was reached
}

type recentWait struct {
	at   time.Time
	wait time.Duration
}

func newServiceWaits() *serviceWaits {
	return &serviceWaits{series: map[string][]recentWait{}}
}

// services starts series for the round's services (namespace/name, up to
// maxWaitSeries), sets each one's longest recent wait and the budget, and
// removes the series of services that are gone.
func (w *serviceWaits) services(ctx context.Context, now time.Time, services []ledger.ServiceNow, budget time.Duration) {
	reclaimBudget.Set(budget.Seconds())
	present := make(map[string]bool, len(services))
	for _, s := range services {
		key := s.Namespace + "/" + s.Name
		present[key] = true
		if _, ok := w.series[key]; !ok && !w.start(ctx, key) {
			continue
		}
		recent := slices.DeleteFunc(w.series[key], func(r recentWait) bool { return now.Sub(r.at) > longestWaitWindow })
		w.series[key] = recent
		serviceWaitLongest.WithLabelValues(s.Namespace, s.Name).Set(longestOf(recent).Seconds())
	}
	for key := range w.series {
		if !present[key] {
			ns, name, _ := strings.Cut(key, "/")
			serviceWait.DeleteLabelValues(ns, name)
			serviceWaitLongest.DeleteLabelValues(ns, name)
			serviceWaitsOverBudget.DeleteLabelValues(ns, name)
			delete(w.series, key)
		}
	}
}

// start makes a service's series, at zero, so that the first wait over
// budget shows as an increase; false when maxWaitSeries services have them.
func (w *serviceWaits) start(ctx context.Context, key string) bool {
	if len(w.series) >= maxWaitSeries {
		if !w.capped {
			w.capped = true
			klog.FromContext(ctx).Info("More inference services than wait series are kept for; the rest are counted in the pool's histogram and their namespaces' HarvestReports", "maxServices", maxWaitSeries, "service", key)
		}
		return false
	}
	ns, name, _ := strings.Cut(key, "/")
	serviceWait.WithLabelValues(ns, name)
	serviceWaitLongest.WithLabelValues(ns, name).Set(0)
	serviceWaitsOverBudget.WithLabelValues(ns, name).Add(0)
	w.series[key] = nil
	return true
}

// observe records that a pod of service key (namespace/name) was scheduled
// at after waiting wait; nothing for a service without series.
func (w *serviceWaits) observe(key string, at time.Time, wait, budget time.Duration) {
	recent, ok := w.series[key]
	if !ok {
		return
	}
	ns, name, _ := strings.Cut(key, "/")
	serviceWait.WithLabelValues(ns, name).Observe(wait.Seconds())
	if wait > budget {
		serviceWaitsOverBudget.WithLabelValues(ns, name).Inc()
	}
	w.series[key] = append(recent, recentWait{at: at, wait: wait})
	serviceWaitLongest.WithLabelValues(ns, name).Set(max(wait, longestOf(recent)).Seconds())
}

func longestOf(recent []recentWait) time.Duration {
	var longest time.Duration
	for _, r := range recent {
		longest = max(longest, r.wait)
	}
	return longest
}
