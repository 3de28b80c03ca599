package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedulerconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/internal/manifests"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gang"
	"github.com/gleaner-dev/gleaner/pkg/plugins/gpuharvest"
	"github.com/gleaner-dev/gleaner/pkg/plugins/reclaimpreemption"
	gleanerscheduler "github.com/gleaner-dev/gleaner/pkg/scheduler"
)

// startGleanerScheduler runs gleaner-scheduler in this process as the binary
// does (app.Setup + app.Run), from the KubeSchedulerConfiguration shipped in
// manifests/, pointed at cp. Leader election is switched off: on shutdown
// app.Run's leader-election callback calls os.Exit(0), which would end the test
// binary with a success code before it reports.
func startGleanerScheduler(t *testing.T, ctx context.Context, cp *controlPlane) (stop func()) {
	t.Helper()
	if minorBin() != "" {
		return startMinorScheduler(t, "gleaner-scheduler", cp, shippedSchedulerConfig(t))
	}
	cc, sched := setupScheduler(t, ctx, cp, shippedSchedulerConfig(t), gleanerscheduler.Plugins()...)
	return runScheduler(t, ctx, cc, sched)
}

// shippedSchedulerConfig is gleaner-scheduler's KubeSchedulerConfiguration as
// manifests/ ships it.
func shippedSchedulerConfig(t *testing.T) []byte {
	t.Helper()
	raw, err := manifests.SchedulerConfig(filepath.Join(repoRoot(t), "manifests"))
	if err != nil {
		t.Fatalf("reading the shipped scheduler config: %v", err)
	}
	return raw
}

// runScheduler runs app.Run until ctx ends or stop is called. app.Run
// registers the process-global configz "componentconfig"; it is removed on
// stop (at the latest when the test ends) so that another scheduler can run in
// this binary.
func runScheduler(t *testing.T, ctx context.Context, cc *schedulerconfig.CompletedConfig, sched *scheduler.Scheduler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := app.Run(ctx, cc, sched); err != nil && ctx.Err() == nil {
			t.Errorf("scheduler stopped: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			configz.Delete("componentconfig")
		})
	}
	t.Cleanup(stop)
	return stop
}

// startDefaultScheduler runs the stock kube-scheduler with its default profile.
// It does not go through app.Run, which would register the process-global
// configz a second time; it starts the same pieces app.Run starts.
func startDefaultScheduler(t *testing.T, ctx context.Context, cp *controlPlane) {
	t.Helper()
	cfg := []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
	if minorBin() != "" {
		startMinorScheduler(t, "default-scheduler", cp, cfg)
		return
	}
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
	cc, sched, err := trySetupScheduler(t, ctx, cp.kubeconfig, config, registry...)
	if err != nil {
		t.Fatalf("setting up scheduler: %v", err)
	}
	return cc, sched
}

// writeSchedulerConfig writes a KubeSchedulerConfiguration with its client
// pointed at kubeconfig and its leaderElection set to leaderElection, and
// returns the file's path.
func writeSchedulerConfig(t *testing.T, config []byte, kubeconfig string, leaderElection map[string]any) string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(config, &doc); err != nil {
		t.Fatalf("parsing scheduler config: %v", err)
	}
	doc["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": 200, "burst": 400}
	doc["leaderElection"] = leaderElection
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "scheduler-config.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func trySetupScheduler(t *testing.T, ctx context.Context, kubeconfig string, config []byte, registry ...app.Option) (*schedulerconfig.CompletedConfig, *scheduler.Scheduler, error) {
	t.Helper()
	path := writeSchedulerConfig(t, config, kubeconfig, map[string]any{"leaderElect": false})
	opts := options.NewOptions()
	opts.ConfigFile = path
	opts.SecureServing.BindPort = 0 // no serving endpoint in tests: nothing scrapes it
	return app.Setup(ctx, opts, registry...)
}

// TestGleanerSchedulerRejectsBadPluginArgs: a bad profile stops gleaner-scheduler
// at start with a message naming the field, before it talks to any API server.
func TestGleanerSchedulerRejectsBadPluginArgs(t *testing.T) {
	raw := shippedSchedulerConfig(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// Nothing listens here: Setup must fail on the config alone.
	writeKubeconfig(t, &rest.Config{Host: "https://127.0.0.1:1"}, kubeconfig)
	tests := []struct{ from, to, wantErr string }{
		{"gpuResourceName: nvidia.com/gpu\n      # gleaner-controller renews", "gpuResourceName: cpu\n      # gleaner-controller renews", "pluginConfig[GPUHarvest].args.gpuResourceName"},
		{"name: gleaner-controller", "name: Not_A_Lease", "pluginConfig[GPUHarvest].args.controllerLease.name"},
		{"bestEffortPriorityThreshold: 0", "bestEffortPriorityThreshold: low", "decoding GPUHarvest args"},
	}
	for _, tt := range tests {
		t.Run(tt.wantErr, func(t *testing.T) {
			bad := strings.Replace(string(raw), tt.from, tt.to, 1)
			if bad == string(raw) {
				t.Fatalf("test edit %q did not apply to the shipped config", tt.from)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, _, err := trySetupScheduler(t, ctx, kubeconfig, []byte(bad), gleanerscheduler.Plugins()...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Setup error = %v, want one naming %s", err, tt.wantErr)
			}
			t.Logf("gleaner-scheduler refuses to start: %v", err)
		})
	}
}

// TestShippedProfile: the shipped KubeSchedulerConfiguration builds the profile
// Gleaner means — GPUHarvest filtering before every other plugin (it rejects
// closed and full nodes most cheaply), scoring with its weight, ReclaimPreemption
// instead of DefaultPreemption, and Gang at Permit.
func TestShippedProfile(t *testing.T) {
	raw := shippedSchedulerConfig(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// The profile is built before the scheduler talks to the API server.
	writeKubeconfig(t, &rest.Config{Host: "https://127.0.0.1:1"}, kubeconfig)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, sched, err := trySetupScheduler(t, ctx, kubeconfig, raw, gleanerscheduler.Plugins()...)
	if err != nil {
		t.Fatal(err)
	}
	fw, ok := sched.Profiles[api.SchedulerName]
	if !ok {
		t.Fatalf("no %s profile", api.SchedulerName)
	}
	plugins := fw.ListPlugins()
	names := func(set *schedulerapi.PluginSet) []string {
		var out []string
		for _, p := range set.Enabled {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(&plugins.Filter); len(got) == 0 || got[0] != gpuharvest.Name {
		t.Errorf("filter order %v, want %s first", got, gpuharvest.Name)
	}
	if got := names(&plugins.PreFilter); !slices.Contains(got, gpuharvest.Name) || !slices.Contains(got, gang.Name) {
		t.Errorf("preFilter %v, want %s and %s", got, gpuharvest.Name, gang.Name)
	}
	if got := names(&plugins.PostFilter); !slices.Contains(got, reclaimpreemption.Name) || slices.Contains(got, "DefaultPreemption") {
		t.Errorf("postFilter %v, want %s in place of DefaultPreemption", got, reclaimpreemption.Name)
	}
	if got := names(&plugins.Permit); !slices.Contains(got, gang.Name) {
		t.Errorf("permit %v, want %s", got, gang.Name)
	}
	var weight int32
	for _, p := range plugins.Score.Enabled {
		if p.Name == gpuharvest.Name {
			weight = p.Weight
		}
	}
	if weight != 10 {
		t.Errorf("%s score weight %d, want the shipped 10", gpuharvest.Name, weight)
	}
	t.Logf("filter order: %v", names(&plugins.Filter))
}
