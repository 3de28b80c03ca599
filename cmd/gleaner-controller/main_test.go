package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every bad option stops the controller before it talks to any API server or
// campaigns for the Lease, naming the flag. (The kubeconfig below points at a
// server that does not exist: reaching it would be a different error.)
func TestBadFlagsStopBeforeLeaderElection(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: t}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "absent")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--inference-selector", "a in (b"}, "--inference-selector"},
		{[]string{"--pool-selector", "!!"}, "--pool-selector"},
		{[]string{"--metrics-scheme", "https", "--metrics-ca-file", missing}, "--metrics-ca-file: open " + missing},
		{[]string{"--metrics-scheme", "https", "--metrics-tls-server-name", "vllm", "--metrics-bearer-token-file", missing}, "--metrics-bearer-token-file: open " + missing},
		{[]string{"--metrics-bearer-token-file", kubeconfig}, "--metrics-bearer-token-file is sent only over --metrics-scheme=https with --metrics-tls-server-name"},
		{[]string{"--metrics-scheme", "https", "--metrics-bearer-token-file", kubeconfig}, "--metrics-tls-server-name set"},
		{[]string{"--metrics-scheme", "ftp"}, `--metrics-scheme "ftp"`},
		{[]string{"--metrics-ca-file", kubeconfig}, "need --metrics-scheme=https"},
		{[]string{"--scrape-interval", "0s"}, "--scrape-interval 0s"},
		{[]string{"--scrape-timeout", "10s"}, "--scrape-timeout 10s: must be positive and at most --scrape-interval (5s)"},
		{[]string{"--reclaim-lead", "0s"}, "--reclaim-lead"},
		{[]string{"--notice-horizon", "10m"}, "--notice-horizon 10m0s: must be at least --forecast-horizon (15m0s)"},
		{[]string{"--harvest-windows", "25:00-08:00"}, "--harvest-windows"},
		{[]string{"--sync-period", "-1s"}, "--sync-period"},
		{[]string{"--profile-clock-scale", "0"}, "--profile-clock-scale 0: must be positive"},
		{[]string{"--profile-clock-scale", "480"}, "--profile-clock-scale 480 needs --profile-clock-origin"},
		{[]string{"--profile-clock-origin", "2026-12-07T10:00:00Z"}, "has no effect with --profile-clock-scale 1"},
		{[]string{"--profile-clock-scale", "480", "--profile-clock-origin", "yesterday"}, `--profile-clock-origin "yesterday"`},
		{[]string{"--inference-namespace-selector", ""}, "every namespace, tenants' included, would count as inference"},
		{[]string{"--inference-namespace-selector", "a=(b"}, "--inference-namespace-selector"},
		{[]string{"--max-reclaim-grace", "0s"}, "--max-reclaim-grace"},
		{[]string{"--pdb-wait", "-1s"}, "--pdb-wait"},
		{[]string{"--kube-api-qps", "0"}, "--kube-api-qps 0 and --kube-api-burst 100: must be positive"},
		{[]string{"--kube-api-burst", "-1"}, "--kube-api-burst -1: must be positive"},
		{[]string{"--gpu-resource", "cpu"}, `--gpu-resource "cpu": must be an extended resource name`},
		{[]string{"--scheduler-config", "gleaner-scheduler-config"}, "--scheduler-config \"gleaner-scheduler-config\": want NAMESPACE/NAME"},
		{[]string{"--secure-port", "70000"}, "--secure-port 70000"},
		{[]string{"--tls-cert-file", missing}, "--tls-cert-file and --tls-private-key-file must be set together"},
		{[]string{"--tls-cert-file", missing, "--tls-private-key-file", kubeconfig}, "--tls-cert-file: stat " + missing},
	} {
		err := run(append([]string{"--kubeconfig", kubeconfig, "--secure-port", "0"}, tt.args...))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %q", tt.args, err, tt.want)
		}
	}
}

// --config sets flags from YAML below the command line's; a misspelt name or
// a bad value is an error naming the file and the flag.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nfs, f := newFlags()
	fs := flatten(nfs)
	path := write("forecast-horizon: 20m\ninference-namespaces: [llm, chat]\ntarget-load: 8\nleader-elect: false\n")
	if err := fs.Parse([]string{"--target-load=4"}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfigFile(fs, path); err != nil {
		t.Fatal(err)
	}
	if f.cfg.Policy.Horizon.String() != "20m0s" || strings.Join(f.cfg.Metrics.Namespaces, ",") != "llm,chat" || f.leaderElect {
		t.Errorf("from the file: horizon %v, namespaces %v, leader-elect %v", f.cfg.Policy.Horizon, f.cfg.Metrics.Namespaces, f.leaderElect)
	}
	if f.cfg.TargetLoad != 4 {
		t.Errorf("target-load %v: the command line's 4 should win over the file's 8", f.cfg.TargetLoad)
	}
	for body, want := range map[string]string{
		"forcast-horizon: 20m\n":           `"forcast-horizon" is not a gleaner-controller flag`,
		"forecast-horizon: soon\n":         "forecast-horizon: invalid argument",
		"pool-selector: {a: b}\n":          "pool-selector: want a value or a list, not a map",
		"target-load: 1\ntarget-load: 2\n": "target-load",
		"config: other.yaml\n":             `"config" is not a gleaner-controller flag`,
	} {
		nfs, _ := newFlags()
		err := applyConfigFile(flatten(nfs), write(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", body, err, want)
		}
	}
	if err := run([]string{"--config", filepath.Join(dir, "absent.yaml"), "--secure-port", "0"}); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("a missing config file: %v", err)
	}
}

// --help prints the flags by section and is not an error; no klog
// underscore-style flag is left.
func TestHelpBySection(t *testing.T) {
	if err := run([]string{"--help"}); err != nil {
		t.Errorf("--help: %v", err)
	}
	nfs, _ := newFlags()
	fs := flatten(nfs)
	for _, want := range []string{"generic", "pool", "policy", "reclaim", "vllm metrics", "leader election", "secure serving", "logs"} {
		if _, ok := nfs.FlagSets[want]; !ok {
			t.Errorf("no section %q in %v", want, nfs.Order)
		}
	}
	for _, name := range []string{"v", "vmodule", "logging-format"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no logging flag --%s", name)
		}
	}
	for _, name := range []string{"log_dir", "alsologtostderr", "add_dir_header"} {
		if fs.Lookup(name) != nil {
			t.Errorf("klog's --%s is still a flag", name)
		}
	}
}
