package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// ceilingPods is how many pods the ceiling scenario takes back, in equal
// parts by each way.
const ceilingPods = 10000

// ceiling measures what the API server and etcd make of evictions on this
// machine with the controller stopped, on the load step's cluster: fresh
// bound pods, dressed as the others, taken back through a client paced as
// the controller's reclaim client (--reclaim-api-qps, --reclaim-api-burst)
// by 32 writers, in equal parts each way:
//
//   - through the Eviction API alone, and again by 128 writers (the
//     controller's --api-write-workers was 32, is 128): whether the writers
//     or the server pace it;
//   - through the Eviction API and then an Event on the pod, as the
//     controller records each eviction;
//   - as kube-scheduler preempts, a DisruptionTarget condition (which a
//     Job's podFailurePolicy reads) and then DELETE;
//   - by DELETE alone, which no reclaim may use (it leaves no
//     DisruptionTarget): the floor.
//
// Each way reports pods a second, the API server's and etcd's CPU per pod
// and how busy the two were (the harness's own client is not counted). The
// ways run in this order after the pods are created and a 10 s pause, once
// each: compare runs, not one run's rows. The harness authenticates as
// system:masters, exempt from API Priority and Fairness, as the controller
// does in this benchmark. The load step's rate is the controller's own only
// where it falls well below these.
func (b *bench) ceiling(ctx context.Context) (string, error) {
	if b.ctrl != nil {
		b.ctrl.stop(15 * time.Second) // nothing else writes or scrapes while it runs
	}
	const workers = 32
	grace := int64(120)
	names := make([]string, ceilingPods)
	if err := parallel(ctx, ceilingPods, workers, func(ctx context.Context, i int) error {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ceiling-%05d", i), Namespace: bestEffortNS,
				Labels: map[string]string{"app": "ceiling"}},
			Spec: v1.PodSpec{NodeName: nodeName(i % b.fleet.nodes), SchedulerName: "gleaner-scheduler",
				PriorityClassName: "gleaner-best-effort", TerminationGracePeriodSeconds: &grace,
				Containers: []v1.Container{{Name: "train", Image: "trainer",
					Resources: v1.ResourceRequirements{Requests: v1.ResourceList{api.GPUResource: resource.MustParse("1")},
						Limits: v1.ResourceList{api.GPUResource: resource.MustParse("1")}}}}},
		}
		dress(p)
		names[i] = p.Name
		return createRunning(ctx, b.cluster.client, p, "")
	}); err != nil {
		return "", fmt.Errorf("creating the ceiling's pods: %w", err)
	}
	// The creates' own watch traffic and compaction are not the first way's.
	if err := sleep(ctx, 10*time.Second); err != nil {
		return "", err
	}
	cfg := rest.CopyConfig(b.cluster.config)
	cfg.QPS, cfg.Burst = 1000, 2000 // gleaner-controller's --reclaim-api-qps and --reclaim-api-burst defaults
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	evict := func(ctx context.Context, name string) error {
		return client.PolicyV1().Evictions(bestEffortNS).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: name, Namespace: bestEffortNS},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace},
		})
	}
	ways := []struct {
		name    string
		take    func(ctx context.Context, name string) error
		writers int
	}{
		{"Eviction API", evict, workers},
		{"Eviction API by 4 times the writers", evict, 4 * workers},
		{"Eviction API and an Event", func(ctx context.Context, name string) error {
			if err := evict(ctx, name); err != nil {
				return err
			}
			now := metav1.NewTime(time.Now())
			_, err := client.CoreV1().Events(bestEffortNS).Create(ctx, &v1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: name + ".", Namespace: bestEffortNS},
				InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: bestEffortNS, Name: name, APIVersion: "v1"},
				Reason:         "Reclaimed", Type: v1.EventTypeWarning, Source: v1.EventSource{Component: "bench-controller"},
				Message:        "Evicted by bench-controller's ceiling scenario with a grace period of 120s",
				FirstTimestamp: now, LastTimestamp: now, Count: 1,
			}, metav1.CreateOptions{})
			return err
		}, workers},
		{"a DisruptionTarget condition and DELETE", func(ctx context.Context, name string) error {
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"DisruptionTarget","status":"True","reason":"PreemptionByGleaner","message":"taken back by bench-controller","lastTransitionTime":%q}]}}`,
				time.Now().UTC().Format(time.RFC3339))
			if _, err := client.CoreV1().Pods(bestEffortNS).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
				return err
			}
			return client.CoreV1().Pods(bestEffortNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		}, workers},
		{"DELETE", func(ctx context.Context, name string) error {
			return client.CoreV1().Pods(bestEffortNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		}, workers},
	}
	per := ceilingPods / len(ways)
	var out []string
	for k, w := range ways {
		part := names[k*per : (k+1)*per]
		apiCPU, etcdCPU := cpuSeconds(b.cluster.api.pid()), cpuSeconds(b.cluster.etcd.pid())
		t0 := time.Now()
		if err := parallel(ctx, len(part), w.writers, func(ctx context.Context, i int) error { return w.take(ctx, part[i]) }); err != nil {
			return "", fmt.Errorf("ceiling, %s: %w", w.name, err)
		}
		took := time.Since(t0).Seconds()
		apiCPU, etcdCPU = cpuSeconds(b.cluster.api.pid())-apiCPU, cpuSeconds(b.cluster.etcd.pid())-etcdCPU
		out = append(out, fmt.Sprintf("%s: %.0f/s (API server %.1f ms, etcd %.1f ms CPU each; the two busy %.1f of %d CPUs)",
			w.name, float64(len(part))/took, apiCPU/float64(len(part))*1000, etcdCPU/float64(len(part))*1000,
			(apiCPU+etcdCPU)/took, numCPU()))
	}
	return fmt.Sprintf("the API server alone, controller stopped, %d pods each way, by %d writers but where said: %s",
		per, workers, strings.Join(out, "; ")), nil
}
