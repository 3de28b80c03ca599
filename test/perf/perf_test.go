// Package perf runs Gleaner's scheduler plugins through Kubernetes' own
// scheduler benchmark, scheduler_perf: the same harness, opcodes, throughput
// collector and per-plugin metrics upstream's thresholds come from. Each
// workload in config/performance-config.yaml runs once through the shipped
// gleaner-scheduler profile and once through the default plugins. Run it with
// `make bench-perf`, which gives every workload a process of its own
// (hack/bench-perf.sh); see bench/README.md.
package perf

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/scheduler"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/test/integration/framework"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/internal/manifests"
	"github.com/gleaner-dev/gleaner/internal/testobj"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/harvest"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gang"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gpuharvest"
	"github.com/gleaner-dev/gleaner/pkg/plugins/reclaimpreemption"
)

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	framework.EtcdMain(m.Run)
}

// BenchmarkPerfScheduling runs every workload of config/performance-config.yaml
// that the label filter selects (-perf-scheduling-label-filter; default
// "performance").
func BenchmarkPerfScheduling(b *testing.B) {
	config, err := withShippedProfile("config/performance-config.yaml", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	perf.PluginNames = append(perf.PluginNames, gpuharvest.Name, reclaimpreemption.Name, gang.Name)
	perf.RunBenchmarkPerfScheduling(b, config, "gleaner", registry(),
		perf.WithPrepareFn(actAsController),
		perf.WithNodeUpdateFn(openNodes))
}

// shippedProfile is what config/performance-config.yaml names as the
// scheduler configuration of every *_gleaner test case.
const shippedProfile = "SHIPPED_PROFILE"

// withShippedProfile writes the shipped gleaner-scheduler profile (the
// config.yaml of manifests/' ConfigMap, which the chart renders) into dir, and
// a copy of the workload config that names it where it says SHIPPED_PROFILE;
// it returns the copy's path. Other paths in the config stay relative to
// test/perf, where the benchmark runs.
func withShippedProfile(configPath, dir string) (string, error) {
	profile, err := manifests.SchedulerConfig(filepath.Join("..", "..", "manifests"))
	if err != nil {
		return "", err
	}
	profilePath := filepath.Join(dir, "gleaner-scheduler-config.yaml")
	if err := os.WriteFile(profilePath, profile, 0o644); err != nil {
		return "", err
	}
	raw, err := os.ReadFile(configPath)
	if err != nil {
		return "", err
	}
	if !bytes.Contains(raw, []byte(shippedProfile)) {
		return "", fmt.Errorf("%s names no %s: its gleaner test cases would not run the shipped profile", configPath, shippedProfile)
	}
	out := filepath.Join(dir, filepath.Base(configPath))
	return out, os.WriteFile(out, bytes.ReplaceAll(raw, []byte(shippedProfile), []byte(profilePath)), 0o644)
}

// registry is the set of plugins gleaner-scheduler registers (pkg/scheduler).
func registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		gpuharvest.Name:        gpuharvest.New,
		reclaimpreemption.Name: reclaimpreemption.New,
		gang.Name:              gang.New,
	}
}

// actAsController does, before each workload, what an installed Gleaner has
// done before any pod arrives: the PodGroup CRD is installed and the
// controller renews its heartbeat Lease, every 2 s until the workload ends, so
// GPUHarvest lends throughout.
func actAsController(tCtx ktesting.TContext) error {
	if err := installPodGroupCRD(tCtx); err != nil {
		return err
	}
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.SystemNamespace}}
	if _, err := tCtx.Client().CoreV1().Namespaces().Create(tCtx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	leases := tCtx.Client().CoordinationV1().Leases(api.SystemNamespace)
	if _, err := leases.Create(tCtx, testobj.Lease("scheduler-perf", time.Now(), 60), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("heartbeat Lease: %w", err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	tCtx.Cleanup(func() { close(done); wg.Wait() })
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-tCtx.Done():
				return
			case <-time.After(2 * time.Second):
			}
			lease, err := leases.Get(tCtx, api.HeartbeatLeaseName, metav1.GetOptions{})
			if err == nil {
				now := metav1.NewMicroTime(time.Now())
				lease.Spec.RenewTime = &now
				_, err = leases.Update(tCtx, lease, metav1.UpdateOptions{})
			}
			if err != nil && tCtx.Err() == nil {
				tCtx.Logf("renewing the heartbeat Lease: %v", err)
			}
		}
	})
	return nil
}

// installPodGroupCRD applies the PodGroup CRD Gleaner ships (Gang reads PodGroups).
func installPodGroupCRD(tCtx ktesting.TContext) error {
	raw, err := os.ReadFile(filepath.Join("..", "..", "charts", "gleaner", "crds", "podgroups.yaml"))
	if err != nil {
		return err
	}
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal(raw, &crd.Object); err != nil {
		return fmt.Errorf("podgroups.yaml: %w", err)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := tCtx.Dynamic().Resource(gvr).Create(tCtx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("PodGroup CRD: %w", err)
	}
	return nil
}

// openNodes publishes an open verdict on every node the workload created, all
// 8 GPUs harvestable, as gleaner-controller does for an idle pool node.
func openNodes(tCtx ktesting.TContext, _ *scheduler.Scheduler, _ *perf.Workload, nodes *v1.NodeList) error {
	patch := harvest.Verdict{State: api.HarvestOpen, HarvestableGPUs: 8}.MergePatch()
	for i := range nodes.Items {
		if _, err := tCtx.Client().CoreV1().Nodes().Patch(tCtx, nodes.Items[i].Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("opening node %s: %w", nodes.Items[i].Name, err)
		}
	}
	return nil
}
