package controller

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMetricsAreDocumented keeps docs/metrics.md and the Grafana dashboard in
// step with the metrics the controller defines.
func TestMetricsAreDocumented(t *testing.T) {
	docs, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range allMetrics {
		if !strings.Contains(string(docs), "`"+m.FQName()+"`") {
			t.Errorf("metric %s is not documented in docs/metrics.md", m.FQName())
		}
	}

	raw, err := os.ReadFile("../../manifests/grafana/gleaner-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	name := regexp.MustCompile(`gleaner_[a-z_]+`)
	suffix := regexp.MustCompile(`_(bucket|sum|count)$`)
	used := 0
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			for _, n := range name.FindAllString(target.Expr, -1) {
				used++
				base := suffix.ReplaceAllString(n, "")
				if !strings.Contains(string(docs), "`"+base+"`") {
					t.Errorf("dashboard panel %q queries %s, which docs/metrics.md does not list", p.Title, n)
				}
			}
		}
	}
	if used == 0 {
		t.Fatal("the dashboard queries no gleaner_ metric")
	}
}
