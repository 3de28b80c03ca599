package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// watchProgress notices a watch that stops delivering. The controller plans
// on its informers' caches and writes a verdict only where the cache says it
// differs, so a node or pod watch that goes quiet (a proxy holding the
// stream, an API server stuck) would leave needed verdicts unwritten while
// the heartbeat still beat.
//
// Every probe period it reads the current resource version of nodes and pods
// with a consistent list of one item: the API server answers only once its
// cache holds everything up to that version. A watch that delivers reaches it
// within about a minute, through an event or the API server's periodic
// bookmark. When an informer has not reached a probe's version after the
// bound, the controller compares what it holds with a consistent list of the
// objects' metadata: if every object's version matches, the resource was
// only quiet; if some differ, the watch stalled, and the controller stops
// renewing the heartbeat (so the scheduler stops lending) until it catches
// up, and says so.
//
// Resource versions are read as numbers, as etcd's revisions are; where one
// is not a number the check is off, and says so once.
type watchProgress struct {
	bound, every time.Duration
	watched      []watched

	mu        sync.Mutex
	lastProbe time.Time
	pending   map[string][]probe // by resource: probe versions not yet reached
	off       bool
}

// watched is one informer whose progress is checked.
type watched struct {
	resource string
	// current is the version the server is at (a consistent list of one).
	current func(ctx context.Context) (string, error)
	// seen is the version the informer last saw.
	seen func() string
	// differ lists the objects' metadata (consistently) and returns the
	// list's version and how many objects differ from the informer's.
	differ func(ctx context.Context) (rv string, n int, err error)
}

type probe struct {
	at time.Time
	rv uint64
}

// DefaultWatchProgressBound is how long an informer may take to reach a
// resource version the API server was at: two of its bookmark periods.
const DefaultWatchProgressBound = 2 * time.Minute

// onePerList reads the current resource version without reading objects.
var onePerList = metav1.ListOptions{Limit: 1}

// newWatchProgress checks the node and pod informers, probing every quarter
// of the bound, at most every 30 s.
func newWatchProgress(client kubernetes.Interface, nodes, pods cache.SharedIndexInformer, bound time.Duration) *watchProgress {
	w := &watchProgress{bound: bound, every: min(30*time.Second, bound/4)}
	for _, r := range []struct {
		resource string
		informer cache.SharedIndexInformer
		list     func(ctx context.Context) (metav1.ListInterface, error)
	}{
		{"nodes", nodes, func(ctx context.Context) (metav1.ListInterface, error) {
			return client.CoreV1().Nodes().List(ctx, onePerList)
		}},
		{"pods", pods, func(ctx context.Context) (metav1.ListInterface, error) {
			return client.CoreV1().Pods("").List(ctx, onePerList)
		}},
	} {
		informer := r.informer
		w.watched = append(w.watched, watched{
			resource: r.resource,
			seen:     informer.LastSyncResourceVersion,
			current: func(ctx context.Context) (string, error) {
				l, err := r.list(ctx)
				if err != nil {
					return "", err
				}
				return l.GetResourceVersion(), nil
			},
			differ: metadataDiffer(client.CoreV1().RESTClient(), r.resource, func() map[string]string {
				have := map[string]string{}
				for _, o := range informer.GetStore().List() {
					if m, err := meta.Accessor(o); err == nil {
						have[m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
					}
				}
				return have
			}),
		})
	}
	return w
}

// check probes when a probe is due and reports the watches that stalled.
func (w *watchProgress) check(ctx context.Context, now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off || w.bound <= 0 {
		return nil
	}
	if w.pending == nil {
		w.pending = map[string][]probe{}
	}
	if w.lastProbe.IsZero() || now.Sub(w.lastProbe) >= w.every {
		w.lastProbe = now
		for _, r := range w.watched {
			raw, err := r.current(ctx)
			if err != nil {
				klog.FromContext(ctx).V(2).Info("Could not read the current resource version; the watch check waits for the next probe", "resource", r.resource, "err", err)
				continue
			}
			rv, ok := w.version(ctx, r.resource, raw)
			if !ok {
				return nil
			}
			w.pending[r.resource] = append(w.pending[r.resource], probe{at: now, rv: rv})
		}
	}
	for _, r := range w.watched {
		raw := r.seen()
		if raw == "" {
			continue // never listed: Run plans only once it has
		}
		seen, ok := w.version(ctx, r.resource, raw)
		if !ok {
			return nil
		}
		left := w.pending[r.resource][:0]
		for _, p := range w.pending[r.resource] {
			if p.rv > seen {
				left = append(left, p)
			}
		}
		w.pending[r.resource] = left
		if len(left) > 0 && now.Sub(left[0].at) > w.bound {
			raw, n, err := r.differ(ctx)
			if err == nil && n == 0 {
				// Quiet, not stalled: the informer holds what the server does.
				listed, ok := w.version(ctx, r.resource, raw)
				if !ok {
					return nil
				}
				w.pending[r.resource] = slices.DeleteFunc(left, func(p probe) bool { return p.rv <= listed })
				watchStalled.WithLabelValues(r.resource).Set(0)
				continue
			}
			watchStalled.WithLabelValues(r.resource).Set(1)
			why := fmt.Sprintf("%d objects differ from the API server's", n)
			if err != nil {
				why = "they could not be compared: " + err.Error()
			}
			return fmt.Errorf("the %s watch has not reached resource version %d, which the API server was at %v ago (bound %v; it is at %d), and %s: not planning on it",
				r.resource, left[0].rv, now.Sub(left[0].at).Round(time.Second), w.bound, seen, why)
		}
		watchStalled.WithLabelValues(r.resource).Set(0)
	}
	return nil
}

// version parses a resource version; one that is not a number turns the
// check off.
func (w *watchProgress) version(ctx context.Context, resource, raw string) (uint64, bool) {
	if raw == "" {
		return 0, true
	}
	rv, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		w.off = true
		klog.FromContext(ctx).Info("Resource versions are not numbers here: the stalled-watch check is off", "resource", resource, "resourceVersion", raw)
		return 0, false
	}
	return rv, true
}

// metadataDiffer returns a watched.differ over a resource's metadata, read in
// pages from the API server (rest is its REST client, e.g. CoreV1's), and
// cached, the informer's versions by namespace/name.
func metadataDiffer(rest rest.Interface, resource string, cached func() map[string]string) func(ctx context.Context) (string, int, error) {
	return func(ctx context.Context) (string, int, error) {
		have := cached()
		var (
			listRV string
			differ int
			cont   string
			seen   = make(map[string]bool, len(have))
		)
		for {
			req := rest.Get().Resource(resource).Param("limit", "500").
				SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
			if cont != "" {
				req = req.Param("continue", cont)
			}
			body, err := req.DoRaw(ctx)
			if err != nil {
				return "", 0, err
			}
			var page metav1.PartialObjectMetadataList
			if err := json.Unmarshal(body, &page); err != nil {
				return "", 0, fmt.Errorf("listing %s metadata: %w", resource, err)
			}
			if listRV == "" {
				listRV = page.ResourceVersion
			}
			for _, o := range page.Items {
				key := o.Namespace + "/" + o.Name
				seen[key] = true
				if cachedRV, ok := have[key]; !ok || newer(o.ResourceVersion, cachedRV) {
					differ++
				}
			}
			if cont = page.Continue; cont == "" {
				break
			}
		}
		for key, cachedRV := range have {
			if !seen[key] && !newer(cachedRV, listRV) {
				differ++ // deleted on the server before the list, still held
			}
		}
		return listRV, differ, nil
	}
}

// newer reports whether resource version a is after b (numbers, as etcd's
// revisions are; otherwise any difference).
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x > y
}
