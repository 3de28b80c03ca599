package controller

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/component-base/metrics"
)

// TestMetricsAreDocumented keeps docs/metrics.md and the Grafana dashboard in
// step with the metrics the controller defines.
func TestMetricsAreDocumented(t *testing.T) {
	docs, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range families.All() {
		if !strings.Contains(string(docs), "`"+m.FQName()+"`") {
			t.Errorf("metric %s is not documented in docs/metrics.md", m.FQName())
		}
	}
}

// TestDashboardQueriesMetricsThatExist: every query of the Grafana
// dashboard, its variables' included, is PromQL that reads metrics the
// controller serves, by labels they have (a gleaner_ metric served
// elsewhere, the vLLM informer's or the scheduler's, must at least be
// listed in docs/metrics.md).
func TestDashboardQueriesMetricsThatExist(t *testing.T) {
	docs, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	served := controllerMetrics(t)
	raw, err := os.ReadFile("../../manifests/grafana/gleaner-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		}
		Panels []panel
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	variables := map[string]bool{}
	var queries []query
	for _, v := range dashboard.Templating.List {
		variables[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
		}
		// label_values(SELECTOR, LABEL): the selector is PromQL, the label one of its metric's.
		m := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`).FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
			continue
		}
		queries = append(queries, query{"variable " + v.Name, m[1], m[2]})
	}
	for _, p := range flatten(dashboard.Panels) {
		for _, target := range p.Targets {
			queries = append(queries, query{"panel " + p.Title, target.Expr, ""})
		}
	}

	// Grafana's variables, as a query is sent: any value will do for parsing.
	variable := regexp.MustCompile(`\$\{?(\w+)\}?`)
	p := parser.NewParser(parser.Options{})
	used := 0
	for _, q := range queries {
		for _, m := range variable.FindAllStringSubmatch(q.expr, -1) {
			if !variables[m[1]] && !strings.HasPrefix(m[1], "__") {
				t.Errorf("%s: %q uses $%s, which the dashboard does not define", q.where, q.expr, m[1])
			}
		}
		text := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m").Replace(q.expr)
		text = variable.ReplaceAllString(text, ".*")
		expr, err := p.ParseExpr(text)
		if err != nil {
			t.Errorf("%s: %q is not PromQL: %v", q.where, q.expr, err)
			continue
		}
		check := func(vs *parser.VectorSelector) []string {
			name := vs.Name
			if !strings.HasPrefix(name, "gleaner_") {
				return nil // the scheduler's own, upstream's names
			}
			used++
			m, base, ok := served.lookup(name)
			if !ok {
				if !strings.Contains(string(docs), "`"+seriesSuffix.ReplaceAllString(name, "")+"`") {
					t.Errorf("%s: %q reads %s, which no component defines in docs/metrics.md", q.where, q.expr, name)
				}
				return nil
			}
			labels := m.labels
			if name == base+"_bucket" {
				labels = append(slices.Clone(labels), "le")
			}
			for _, lm := range vs.LabelMatchers {
				if lm.Name != "__name__" && !slices.Contains(labels, lm.Name) {
					t.Errorf("%s: %q selects %s by %s; its labels are %v", q.where, q.expr, name, lm.Name, labels)
				}
			}
			return labels
		}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			switch n := node.(type) {
			case *parser.VectorSelector:
				check(n)
			case *parser.AggregateExpr:
				// sum by (LABELS): each label is one of a metric's summed.
				var have []string
				gleaner := false
				parser.Inspect(n.Expr, func(node parser.Node, _ []parser.Node) error {
					if vs, ok := node.(*parser.VectorSelector); ok {
						gleaner = gleaner || strings.HasPrefix(vs.Name, "gleaner_")
						if m, base, ok := served.lookup(vs.Name); ok {
							have = append(have, m.labels...)
							if vs.Name == base+"_bucket" {
								have = append(have, "le")
							}
						}
					}
					return nil
				})
				for _, l := range n.Grouping {
					if gleaner && len(have) > 0 && !n.Without && !slices.Contains(have, l) {
						t.Errorf("%s: %q sums by %s, which none of its metrics has (%v)", q.where, q.expr, l, have)
					}
				}
			}
			return nil
		})
		if q.label != "" {
			vs, ok := expr.(*parser.VectorSelector)
			if !ok {
				t.Errorf("%s: label_values of %q, not a selector", q.where, q.expr)
			} else if labels := check(vs); labels != nil && !slices.Contains(labels, q.label) {
				t.Errorf("%s: label_values(..., %s): %s has labels %v", q.where, q.label, vs.Name, labels)
			}
		}
	}
	if used == 0 {
		t.Fatal("the dashboard queries no gleaner_ metric")
	}
}

// seriesSuffix ends the names of a histogram's series.
var seriesSuffix = regexp.MustCompile(`_(bucket|sum|count)$`)

type panel struct {
	Title   string
	Targets []struct{ Expr string }
	// Panels are a collapsed row's.
	Panels []panel
}

type query struct {
	where, expr string
	// label is label_values' label, for a variable.
	label string
}

func flatten(panels []panel) []panel {
	var out []panel
	for _, p := range panels {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// servedMetric is one of the controller's metrics: its variable labels and
// whether it is a histogram (served as _bucket, _sum and _count).
type servedMetric struct {
	labels    []string
	histogram bool
}

type servedMetrics map[string]servedMetric

// lookup finds the metric a series name belongs to, and its base name.
func (s servedMetrics) lookup(name string) (servedMetric, string, bool) {
	if m, ok := s[name]; ok && !m.histogram {
		return m, name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if m, ok := s[base]; ok && m.histogram {
				return m, base, true
			}
		}
	}
	return servedMetric{}, "", false
}

// controllerMetrics are the families by name, with their labels as their
// descriptors say.
func controllerMetrics(t *testing.T) servedMetrics {
	t.Helper()
	RegisterMetrics() // creates them: a descriptor exists from then on
	variableLabels := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	out := servedMetrics{}
	for _, m := range families.All() {
		ch := make(chan *prometheus.Desc, 1)
		m.Describe(ch)
		close(ch)
		desc := <-ch
		if desc == nil {
			t.Fatalf("%s has no descriptor", m.FQName())
		}
		match := variableLabels.FindStringSubmatch(desc.String())
		if match == nil {
			t.Fatalf("%s: cannot read its labels from %s", m.FQName(), desc)
		}
		var labels []string
		for _, l := range strings.Split(match[1], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		_, histogram := m.(*metrics.Histogram)
		_, histogramVec := m.(*metrics.HistogramVec)
		out[m.FQName()] = servedMetric{labels: labels, histogram: histogram || histogramVec}
	}
	return out
}
