package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// installCRDs creates the CRDs of manifests/shared (PodGroups, GPUPools,
// HarvestReports), so that the controller publishes its status as in a cluster.
func installCRDs(ctx context.Context, c *cluster) error {
	client, err := apiextensions.NewForConfig(c.config)
	if err != nil {
		return err
	}
	files, err := filepath.Glob("manifests/shared/crds/*.yaml")
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in manifests/shared/crds (run from the repository root): %v", err)
	}
	var names []string
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		for _, doc := range bytes.Split(raw, []byte("\n---")) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(doc, &crd); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			names = append(names, crd.Name)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range names {
		for {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err == nil && established(crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established within 30s", name)
			}
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// mark is the state at the start of a scenario's window.
type mark struct {
	name  string
	start time.Time
	pid   int
	cpu   float64
	api   requests
	// the API server's, etcd's and vllm-sim's CPU seconds at the start
	others [3]float64
}

// result is one scenario's figures.
type result struct {
	name                   string
	window                 time.Duration
	rounds                 int
	roundP50, roundMax     float64 // seconds, wall
	planP50, planMax       float64 // wall of observe+plan
	planCPUP50, planCPUMax float64
	processCPU             float64    // controller process CPU seconds per second
	othersCPU              [3]float64 // the API server's, etcd's and vllm-sim's
	writes, requests       requests
	rss, heap              float64
	extra                  string
}

func (b *bench) begin(name string) mark {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := mark{name: name, start: time.Now(), pid: b.ctrl.pid(), cpu: cpuSeconds(b.ctrl.pid()), others: b.othersCPU()}
	if mfs, err := scrape(ctx, b.cluster.host+"/metrics", b.cluster.token); err == nil {
		m.api = apiRequests(mfs)
	}
	b.rss.reset(b.ctrl.pid())
	return m
}

func (b *bench) end(ctx context.Context, m mark) result {
	now := time.Now()
	r := result{name: m.name, window: now.Sub(m.start)}
	if b.ctrl.pid() == m.pid {
		r.processCPU = (cpuSeconds(m.pid) - m.cpu) / r.window.Seconds()
	} else {
		r.processCPU = cpuSeconds(b.ctrl.pid()) / r.window.Seconds() // the successor, from its start
	}
	for i, c := range b.othersCPU() {
		r.othersCPU[i] = (c - m.others[i]) / r.window.Seconds()
	}
	if mfs, err := scrape(ctx, b.cluster.host+"/metrics", b.cluster.token); err == nil {
		r.requests = apiRequests(mfs).minus(m.api)
		r.writes = requests{}
		for k, v := range r.requests {
			if isWrite(k) {
				r.writes[k] = v
			}
		}
	}
	if mfs, err := b.controllerMetrics(ctx); err == nil {
		r.heap = gauge(mfs, "go_memstats_heap_inuse_bytes")
	}
	r.rss = b.rss.reset(b.ctrl.pid())
	finished, _ := readLog(b.ctrl.log, "Finished round")
	planned, _ := readLog(b.ctrl.log, "Planned round")
	var wall, plan, cpu []float64
	for _, l := range within(finished, m.start, now) {
		wall = append(wall, l.float("seconds"))
	}
	for _, l := range within(planned, m.start, now) {
		plan = append(plan, l.float("planSeconds"))
		cpu = append(cpu, l.float("planCPUSeconds"))
	}
	r.rounds = len(wall)
	r.roundP50, r.roundMax = quantile(wall, 0.5), quantile(wall, 1)
	r.planP50, r.planMax = quantile(plan, 0.5), quantile(plan, 1)
	r.planCPUP50, r.planCPUMax = quantile(cpu, 0.5), quantile(cpu, 1)
	return r
}

// othersCPU is the CPU seconds the API server, etcd and vllm-sim have used:
// what the controller's writes wait on shares the machine with them.
func (b *bench) othersCPU() [3]float64 {
	return [3]float64{cpuSeconds(b.cluster.api.pid()), cpuSeconds(b.cluster.etcd.pid()), cpuSeconds(b.sim.pid())}
}

func header() string {
	return "| scenario | window | rounds | round wall p50 / max | observe+plan wall p50 / max | observe+plan CPU p50 / max | controller CPU (API server, etcd, vllm-sim) | API writes per round, by kind | API requests by verb (window) | peak RSS | Go heap |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|"
}

func ms(s float64) string { return fmt.Sprintf("%.0f ms", s*1000) }

func (r result) row() string {
	perRound := float64(max(r.rounds, 1))
	row := fmt.Sprintf("| %s | %.0f s | %d | %s / %s | %s / %s | %s / %s | %.2f cores (%.2f, %.2f, %.2f) | %s | %s | %.0f MiB | %.0f MiB |",
		r.name, r.window.Seconds(), r.rounds, ms(r.roundP50), ms(r.roundMax), ms(r.planP50), ms(r.planMax),
		ms(r.planCPUP50), ms(r.planCPUMax), r.processCPU, r.othersCPU[0], r.othersCPU[1], r.othersCPU[2], formatCounts(r.writes, perRound), formatCounts(r.requests.byVerb(), 1),
		r.rss/(1<<20), r.heap/(1<<20))
	if r.extra != "" {
		row += "\n|  | " + strings.ReplaceAll(r.extra, "|", "/") + " |||||||||"
	}
	return row
}
