package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedulerconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"sigs.k8s.io/yaml"

	gleanerscheduler "github.com/gleaner-dev/gleaner/pkg/scheduler"
)

// startGleanerScheduler runs gleaner-scheduler in this process as the binary
// does (app.Setup + app.Run), from the KubeSchedulerConfiguration shipped in
// manifests/, pointed at cp. Leader election is switched off: on shutdown
// app.Run's leader-election callback calls os.Exit(0), which would end the test
// binary with a success code before it reports.
func startGleanerScheduler(t *testing.T, ctx context.Context, cp *controlPlane) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "manifests", "scheduler", "config.yaml"))
	if err != nil {
		t.Fatalf("reading the shipped scheduler config: %v", err)
	}
	cc, sched := setupScheduler(t, ctx, cp, raw, gleanerscheduler.Plugins()...)
	go func() {
		if err := app.Run(ctx, cc, sched); err != nil && ctx.Err() == nil {
			t.Errorf("gleaner-scheduler stopped: %v", err)
		}
	}()
}

// startDefaultScheduler runs the stock kube-scheduler with its default profile.
// It does not go through app.Run, which would register the process-global
// configz a second time; it starts the same pieces app.Run starts.
func startDefaultScheduler(t *testing.T, ctx context.Context, cp *controlPlane) {
	t.Helper()
	cfg := []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
	cc, sched := setupScheduler(t, ctx, cp, cfg)
	cc.EventBroadcaster.StartRecordingToSink(ctx.Done())
	cc.InformerFactory.Start(ctx.Done())
	if cc.DynInformerFactory != nil {
		cc.DynInformerFactory.Start(ctx.Done())
	}
	cc.InformerFactory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		t.Fatalf("default scheduler handlers: %v", err)
	}
	go sched.Run(ctx)
}

func setupScheduler(t *testing.T, ctx context.Context, cp *controlPlane, config []byte, registry ...app.Option) (*schedulerconfig.CompletedConfig, *scheduler.Scheduler) {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(config, &doc); err != nil {
		t.Fatalf("parsing scheduler config: %v", err)
	}
	doc["clientConnection"] = map[string]any{"kubeconfig": cp.kubeconfig, "qps": 200, "burst": 400}
	doc["leaderElection"] = map[string]any{"leaderElect": false}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "scheduler-config.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := options.NewOptions()
	opts.ConfigFile = path
	opts.SecureServing.BindPort = 0 // no serving endpoint in tests: nothing scrapes it
	cc, sched, err := app.Setup(ctx, opts, registry...)
	if err != nil {
		t.Fatalf("setting up scheduler from %s: %v", path, err)
	}
	return cc, sched
}
