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
		{[]string{"--harvest-windows", "25:00-08:00"}, "--harvest-windows"},
		{[]string{"--sync-period", "-1s"}, "--sync-period"},
		{[]string{"--inference-namespace-selector", ""}, "every namespace, tenants' included, would count as inference"},
		{[]string{"--inference-namespace-selector", "a=(b"}, "--inference-namespace-selector"},
		{[]string{"--max-reclaim-grace", "0s"}, "--max-reclaim-grace"},
		{[]string{"--pdb-wait", "-1s"}, "--pdb-wait"},
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
