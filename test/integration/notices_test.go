package integration

import (
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/controller"
	"github.com/gleaner-dev/gleaner/pkg/demand"
)

// TestReclaimNotices: a service whose learned profile peaks in an hour the
// horizon reaches, beyond the reclaim lead, closes the node its lent pods run
// on and gives them notices with the expected eviction time, evicting
// nothing; once the forecast no longer needs their GPUs the notices are
// withdrawn.
func TestReclaimNotices(t *testing.T) {
	env := startHarvestEnv(t)
	env.startChat()
	fillLent(env, "gpu-b", "fill-b")

	// The peak: the first hour that starts at least 20 minutes from now,
	// beyond a 15-minute horizon (the default) and the 5-minute lead.
	now := time.Now().UTC()
	peak := now.Truncate(time.Hour).Add(time.Hour)
	if peak.Sub(now) < 20*time.Minute {
		peak = peak.Add(time.Hour)
	}
	var profile demand.Profile
	profile.Peak[demand.HourOfWeek(now)], profile.Weeks[demand.HourOfWeek(now)] = 4, 1
	profile.Peak[demand.HourOfWeek(peak)], profile.Weeks[demand.HourOfWeek(peak)] = 100, 1
	stored, err := json.Marshal(profile)
	if err != nil {
		t.Fatal(err)
	}
	d := testobj.Deployment(servingNS, "chat", 1, 4, map[string]string{api.AnnotationDemandProfile: string(stored)})
	d.Spec.Template.Spec.Containers[0].Image = "vllm/vllm-openai"
	if _, err := env.client.AppsV1().Deployments(servingNS).Create(env.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A controller whose horizon reaches the peak: 100 requests need 7
	// replicas, so every lent GPU is wanted, but not within the lead.
	env.stopController()
	env.startControllerWith(func(c *controller.Config) {
		c.Policy.Horizon, c.Heartbeat.Identity = peak.Sub(now)+30*time.Minute, "far-sighted"
	})
	env.waitHeartbeatHolder("far-sighted")
	var noticed *v1.Pod
	waitFor(t, "a reclaim notice on fill-b-0", 20*time.Second, func() bool {
		noticed = env.pod(researchNS, "fill-b-0")
		return noticed.Annotations[api.AnnotationReclaimNotice] != ""
	})
	at, err := time.Parse(time.RFC3339, noticed.Annotations[api.AnnotationReclaimNotice])
	if err != nil {
		t.Fatal(err)
	}
	// Evicted once the lead's window touches the peak's hour: 5 minutes
	// before it, found to the minute.
	if due := peak.Add(-5 * time.Minute); at.Before(due) || at.After(due.Add(time.Minute)) {
		t.Errorf("notice at %v, want within a minute after %v", at, due)
	}
	if c := podCondition(noticed, api.ConditionReclaimNotice); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("condition %+v, want True", c)
	}
	ev := env.waitEvent(researchNS, "fill-b-0", controller.ReasonReclaimNotice, "serving/chat", 10*time.Second)
	time.Sleep(3 * scrapeInterval)
	if _, deleted := env.kubelet.deletionGrace(researchNS, "fill-b-0"); deleted {
		t.Fatal("fill-b-0 was evicted though its GPUs are needed only beyond the lead")
	}
	t.Logf("notice on fill-b-0: %s", ev.Message)

	// A controller whose horizon stops short of the peak no longer needs
	// the GPUs: the notice is withdrawn.
	env.stopController()
	env.startControllerWith(func(c *controller.Config) { c.Heartbeat.Identity = "near-sighted" })
	waitFor(t, "the notice withdrawn", 20*time.Second, func() bool {
		p := env.pod(researchNS, "fill-b-0")
		c := podCondition(p, api.ConditionReclaimNotice)
		return p.Annotations[api.AnnotationReclaimNotice] == "" && c != nil && c.Status == v1.ConditionFalse
	})
	env.waitEvent(researchNS, "fill-b-0", controller.ReasonReclaimNoticeWithdrawn, "withdrawn", 10*time.Second)
	env.waitVerdict("gpu-b", open(8), 20*time.Second)
}

// podCondition is the pod's condition of type t, or nil.
func podCondition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}
