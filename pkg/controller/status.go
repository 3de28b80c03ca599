package controller

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/ledger"
	"github.com/gleaner-dev/gleaner/pkg/round"
	"github.com/gleaner-dev/gleaner/pkg/status"
)

// StatusConfig configures what the controller publishes for people: the
// pool's GPUPool and each namespace's HarvestReport (pkg/api/v1alpha1).
type StatusConfig struct {
	// Client writes them; nil: nothing is published (the ledger still counts).
	Client dynamic.Interface
	// PoolName names the GPUPool. Default api.PoolInference.
	PoolName string
	// Interval is the least time between two writes of one object when it
	// changed. Default 10 s. Unchanged, an object is written again every
	// Refresh (default 1 min) while its GPU-seconds grow or, for the pool,
	// to keep its observed time fresh.
	Interval, Refresh time.Duration
	// Price values harvested GPU-hours; nil: no value is published.
	Price *v1alpha1.Price
}

// Outlook is how far ahead and how finely the pool's outlook forecasts, and
// how often it is forecast again.
const (
	OutlookSpan  = 24 * time.Hour
	OutlookStep  = time.Hour
	outlookEvery = time.Minute
	// maxReportWrites bounds the HarvestReports written in one round, so that
	// many namespaces cannot delay the next round; the rest go next round.
	maxReportWrites = 20
)

func (c *StatusConfig) defaults() {
	if c.PoolName == "" {
		c.PoolName = "inference"
	}
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.Refresh <= 0 {
		c.Refresh = time.Minute
	}
}

// publisher writes the GPUPool and the HarvestReports.
type publisher struct {
	cfg     StatusConfig
	ledger  *ledger.Ledger
	history status.History
	// restored: the published objects were read back (or there were none);
	// poolRestored: the GPUPool was, so a retry for the HarvestReports does
	// not add its records to the planner twice.
	restored, poolRestored bool
	// disabled: the CRDs are not installed; said once.
	disabled bool

	outlook   []v1alpha1.OutlookPoint
	outlookAt time.Time
	pool      written
	reports   map[string]written
}

// written is what was last written of an object, and when.
type written struct {
	at      time.Time
	content v1alpha1.GPUPoolStatus
	seconds int64
}

// restore reads back the published GPUPool (its history, and the planner's
// record of its availability forecasts) and every HarvestReport (totals and
// jobs), once: a restart forgets nothing.
func (p *publisher) restore(ctx context.Context, planner *round.Planner) error {
	if p.restored || p.disabled || p.cfg.Client == nil {
		return nil
	}
	if !p.poolRestored {
		if err := p.restorePool(ctx, planner); err != nil || p.disabled {
			return err
		}
		p.poolRestored = true
	}
	list, err := p.cfg.Client.Resource(v1alpha1.HarvestReportResource).List(ctx, metav1.ListOptions{})
	switch {
	case v1alpha1.NotServed(err) || apierrors.IsForbidden(err):
		p.disable(ctx, err)
		return nil
	case err != nil:
		return fmt.Errorf("listing HarvestReports: %w", err)
	}
	for _, item := range list.Items {
		if item.GetName() != v1alpha1.HarvestReportName {
			continue
		}
		var hr v1alpha1.HarvestReport
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &hr); err != nil {
			klog.FromContext(ctx).Error(err, "A published HarvestReport is unreadable; its namespace's report starts afresh", "namespace", item.GetNamespace())
			continue
		}
		p.ledger.Restore(item.GetNamespace(), hr.Status)
	}
	p.restored = true
	return nil
}

// restorePool reads back the published GPUPool: its history, and the
// planner's records of its availability forecasts (and of how far they came
// true) and of the pool's profile.
func (p *publisher) restorePool(ctx context.Context, planner *round.Planner) error {
	pool, err := p.cfg.Client.Resource(v1alpha1.GPUPoolResource).Get(ctx, p.cfg.PoolName, metav1.GetOptions{})
	switch {
	case v1alpha1.NotServed(err) || apierrors.IsForbidden(err):
		p.disable(ctx, err)
		return nil
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading GPUPool %s: %w", p.cfg.PoolName, err)
	default:
		var gp v1alpha1.GPUPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(pool.Object, &gp); err != nil {
			klog.FromContext(ctx).Error(err, "The published GPUPool is unreadable; its history and the planner's memory start afresh", "pool", p.cfg.PoolName)
			return nil
		}
		p.history.Restore(gp.Status.History)
		m, err := loadMemory(gp.Status)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Part of the planner's memory in the published GPUPool is refused", "pool", p.cfg.PoolName)
		}
		if err := planner.Restore(m); err != nil {
			klog.FromContext(ctx).Error(err, "Part of the planner's memory in the published GPUPool is refused", "pool", p.cfg.PoolName)
		}
	}
	return nil
}

func (p *publisher) disable(ctx context.Context, err error) {
	p.disabled = true
	klog.FromContext(ctx).Info("Publishing no GPUPool or HarvestReports: the gleaner.dev CRDs are not installed (charts/gleaner/crds) or this controller may not read them (its ClusterRole)", "err", err)
}

// publish writes the pool's status and the namespaces' reports that are due.
func (p *publisher) publish(ctx context.Context, now time.Time, o observed, d round.Decision, planner *round.Planner, planning bool) []error {
	if p.cfg.Client == nil || p.disabled {
		return nil
	}
	if err := p.restore(ctx, planner); err != nil || p.disabled {
		return errorsOf(err)
	}
	var errs []error
	pool := status.Pool(now, o.Nodes, d.Plan, planning)
	pool.LendingStopped, pool.LendingStoppedReason = string(o.stop.Mode), o.stop.Reason
	p.history.Add(now, pool.GPUs)
	if p.outlook == nil || now.Sub(p.outlookAt) >= outlookEvery {
		p.outlook, p.outlookAt = outlookOf(planner.Outlook(d, OutlookSpan, OutlookStep)), now
	}
	pool.History, pool.Outlook = p.history.Samples(), p.outlook
	pool.HarvestedGPUSeconds, pool.Price = p.ledger.HarvestedGPUSeconds(), p.cfg.Price
	storeMemory(planner.Memory(now), &pool)
	if p.due(p.pool, now, !samePool(p.pool.content, pool)) {
		if err := p.apply(ctx, v1alpha1.GPUPoolResource, "", p.cfg.PoolName, "GPUPool", &pool); err != nil {
			errs = append(errs, err)
		} else {
			p.pool = written{at: now, content: pool}
		}
	}
	namespaces := p.ledger.Namespaces()
	for ns := range p.reports { // namespaces the ledger forgot (deleted)
		if _, found := slices.BinarySearch(namespaces, ns); !found {
			delete(p.reports, ns)
		}
	}
	writes := 0
	for _, ns := range namespaces {
		st, changed := p.ledger.Report(ns, now, p.cfg.Price)
		last := p.reports[ns]
		if !p.due(last, now, changed) || (!changed && st.HarvestedGPUSeconds == last.seconds) {
			continue
		}
		if writes == maxReportWrites {
			break
		}
		writes++
		err := p.apply(ctx, v1alpha1.HarvestReportResource, ns, v1alpha1.HarvestReportName, "HarvestReport", &st)
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err) && strings.Contains(err.Error(), "being terminated"):
			// The namespace is gone or going: no error; the ledger forgets it
			// once the namespace informer sees it gone.
		case err != nil:
			errs = append(errs, err)
		default:
			p.ledger.Published(ns)
			if p.reports == nil {
				p.reports = map[string]written{}
			}
			p.reports[ns] = written{at: now, seconds: st.HarvestedGPUSeconds}
		}
	}
	return errs
}

// due says whether an object last written as w should be written at now.
func (p *publisher) due(w written, now time.Time, changed bool) bool {
	since := now.Sub(w.at)
	return w.at.IsZero() || since >= p.cfg.Refresh || changed && since >= p.cfg.Interval
}

// samePool says whether two pool statuses differ only in their times.
func samePool(a, b v1alpha1.GPUPoolStatus) bool {
	a.ObservedTime, b.ObservedTime = metav1.Time{}, metav1.Time{}
	return reflect.DeepEqual(a, b)
}

// apply writes an object's status with server-side apply, creating the
// object first when it does not exist.
func (p *publisher) apply(ctx context.Context, gvr schema.GroupVersionResource, ns, name, kind string, st any) error {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		return err
	}
	obj := func(withStatus bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version,
			"kind":       kind,
			"metadata":   map[string]any{"name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": Component}},
		}}
		if ns != "" {
			u.SetNamespace(ns)
		}
		if withStatus {
			u.Object["status"] = content
		}
		return u
	}
	var ri dynamic.ResourceInterface = p.cfg.Client.Resource(gvr)
	if ns != "" {
		ri = p.cfg.Client.Resource(gvr).Namespace(ns)
	}
	opts := metav1.ApplyOptions{FieldManager: Component, Force: true}
	_, err = ri.ApplyStatus(ctx, name, obj(true), opts)
	if apierrors.IsNotFound(err) && !v1alpha1.NotServed(err) {
		if _, err = ri.Apply(ctx, name, obj(false), opts); err == nil {
			_, err = ri.ApplyStatus(ctx, name, obj(true), opts)
		}
	}
	if err != nil {
		if ns != "" {
			return fmt.Errorf("publishing %s %s/%s: %w", kind, ns, name, err)
		}
		return fmt.Errorf("publishing %s %s: %w", kind, name, err)
	}
	return nil
}

// noticesOf are a decision's notices as the ledger records them.
func noticesOf(d round.Decision) map[*v1.Pod]ledger.NoticeInfo {
	out := make(map[*v1.Pod]ledger.NoticeInfo, len(d.Notices))
	for _, n := range d.Notices {
		out[n.Pod] = ledger.NoticeInfo{At: n.At, Node: n.Node, Why: noticeWhy(n)}
	}
	return out
}

func errorsOf(err error) []error {
	if err == nil {
		return nil
	}
	return []error{err}
}
