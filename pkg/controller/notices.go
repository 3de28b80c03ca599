package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

// Reasons of the Events and pod conditions of reclaim notices.
const (
	ReasonReclaimNotice          = "GleanerReclaimNotice"
	ReasonReclaimNoticeWithdrawn = "GleanerReclaimNoticeWithdrawn"
)

// notify writes the round's notices on their pods (annotation
// api.AnnotationReclaimNotice, condition api.ConditionReclaimNotice, an
// Event the first time) and withdraws those of pods no longer noticed and not
// being evicted. A pod that already carries its notice's time is left alone:
// the round moves a notice's time only by whole steps (round.Notice.At).
//
// A notice the controller did not give (a previous leader's, or the pod's
// own) is withdrawn once per pod and then left alone: the annotation is the
// tenant's to write, moves nothing (the round keeps its own notices), and a
// tenant writing it back before every round must not cost two writes and an
// Event each time.
func (c *Controller) notify(ctx context.Context, pods []*v1.Pod, d round.Decision) []error {
	logger := klog.FromContext(ctx)
	want := make(map[types.UID]round.Notice, len(d.Notices))
	for _, n := range d.Notices {
		want[n.Pod.UID] = n
	}
	evicted := make(map[types.UID]bool, len(d.Victims))
	for _, v := range d.Victims {
		evicted[v.Pod.UID] = true
	}
	var errs []error
	live := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		live[p.UID] = true
		if p.Spec.NodeName == "" || !api.IsBestEffort(p, *c.cfg.BestEffortPriorityThreshold) {
			continue
		}
		n, noticed := want[p.UID]
		current, has := p.Annotations[api.AnnotationReclaimNotice]
		switch {
		case noticed:
			if has && current == api.FormatTime(n.At) {
				c.noticed[p.UID] = true
				continue
			}
			why := noticeWhy(n)
			// Ours from the first try: a write that failed halfway (or timed
			// out after the server applied it) may have left it on the pod.
			c.noticed[p.UID] = true
			if err := c.writeNotice(ctx, p, n.At, v1.ConditionTrue, ReasonReclaimNotice, why); err != nil {
				noticesTotal.WithLabelValues("error").Inc()
				errs = append(errs, err)
				continue
			}
			if !has {
				noticesTotal.WithLabelValues("given").Inc()
				c.recorder.Eventf(p, v1.EventTypeNormal, ReasonReclaimNotice, "%s; checkpoint before then", why)
				logger.Info("Gave a reclaim notice", "pod", klog.KObj(p), "at", n.At, "node", n.Node, "for", n.Services)
			} else {
				noticesTotal.WithLabelValues("moved").Inc()
			}
		case has && !evicted[p.UID] && p.DeletionTimestamp == nil && (c.noticed[p.UID] || !c.foreign[p.UID]):
			why := "The GPUs of node " + p.Spec.NodeName + " are no longer forecast to be needed; the notice is withdrawn"
			if err := c.writeNotice(ctx, p, time.Time{}, v1.ConditionFalse, ReasonReclaimNoticeWithdrawn, why); err != nil {
				noticesTotal.WithLabelValues("error").Inc()
				errs = append(errs, err)
				continue
			}
			if !c.noticed[p.UID] {
				c.foreign[p.UID] = true
			}
			delete(c.noticed, p.UID)
			noticesTotal.WithLabelValues("withdrawn").Inc()
			c.recorder.Event(p, v1.EventTypeNormal, ReasonReclaimNoticeWithdrawn, why)
			logger.Info("Withdrew a reclaim notice", "pod", klog.KObj(p))
		}
	}
	gone := func(uid types.UID, _ bool) bool { return !live[uid] }
	maps.DeleteFunc(c.noticed, gone)
	maps.DeleteFunc(c.foreign, gone)
	return errs
}

// noticeWhy says when and for whom a noticed pod is expected to be evicted.
func noticeWhy(n round.Notice) string {
	who := "inference"
	if len(n.Services) > 0 {
		who = strings.Join(n.Services, ", ")
	}
	return fmt.Sprintf("Expected to be evicted at %s: the GPUs of node %s are forecast to be needed by %s",
		api.FormatTime(n.At), n.Node, who)
}

// writeNotice sets the pod's notice annotation (at; the zero time removes
// it) and its notice condition.
func (c *Controller) writeNotice(ctx context.Context, p *v1.Pod, at time.Time, status v1.ConditionStatus, reason, message string) error {
	if _, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, api.ReclaimNoticePatch(at), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("reclaim notice on pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	cond, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.PodCondition{{
		Type: api.ConditionReclaimNotice, Status: status, Reason: reason, Message: message,
		LastTransitionTime: metav1.NewTime(c.cfg.Clock.Now()),
	}}}})
	if err != nil {
		return err
	}
	if _, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, cond, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("reclaim notice condition on pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
