// Package chart renders Gleaner's Helm chart (charts/gleaner) with Helm's
// own engine, and writes manifests/ from it: the chart is the one source of
// the install, and manifests/ its default rendering for kubectl.
package chart

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	helmchart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

// Namespace is where the chart installs: Gleaner's Leases and admission
// policies name it.
const Namespace = "gleaner-system"

// Chart is charts/gleaner rendered with some values, as `helm template` would.
type Chart struct {
	// Templates maps a template's path under templates/ (scheduler/config.yaml)
	// to its rendered text; templates that render to nothing are left out.
	Templates map[string]string
	// CRDs maps a file's path under crds/ to its content, which Helm installs
	// before the templates and never deletes.
	CRDs map[string]string
	// Tests maps a template's path under templates/ (tests/status.yaml) to
	// its rendered text: `helm test`'s hooks, which an install does not
	// create, so they are in neither Templates nor YAML.
	Tests map[string]string
	// Notes is NOTES.txt rendered: what helm install prints.
	Notes string
}

// LoadChart reads the chart in dir, or packaged in the .tgz file dir.
func LoadChart(dir string) (*helmchart.Chart, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	return ch, nil
}

// RenderChart renders the chart in dir with values over its defaults, into
// namespace, checking the values against values.schema.json first.
func RenderChart(dir string, values map[string]any, namespace string) (*Chart, error) {
	ch, err := LoadChart(dir)
	if err != nil {
		return nil, err
	}
	opts := common.ReleaseOptions{Name: "gleaner", Namespace: namespace, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(ch, values, opts, nil)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering chart %s: %w", dir, err)
	}
	r := &Chart{Templates: map[string]string{}, CRDs: map[string]string{}, Tests: map[string]string{}}
	prefix := ch.Name() + "/templates/"
	for name, text := range out {
		rel, ok := strings.CutPrefix(name, prefix)
		if rel == "NOTES.txt" {
			r.Notes = text
		}
		if !ok || path.Ext(rel) != ".yaml" || strings.TrimSpace(text) == "" {
			continue // NOTES.txt, helpers, and templates switched off by values
		}
		if strings.HasPrefix(rel, "tests/") {
			r.Tests[rel] = text
			continue
		}
		r.Templates[rel] = text
	}
	for _, crd := range ch.CRDObjects() {
		r.CRDs[strings.TrimPrefix(crd.Filename, ch.Name()+"/crds/")] = string(crd.File.Data)
	}
	return r, nil
}

// YAML is every object the chart renders, CRDs first, as one stream.
func (c *Chart) YAML() []byte {
	var b strings.Builder
	for _, m := range []map[string]string{c.CRDs, c.Templates} {
		for _, name := range slices.Sorted(maps.Keys(m)) {
			b.WriteString("---\n")
			b.WriteString(strings.TrimLeft(m[name], "\n"))
			if !strings.HasSuffix(m[name], "\n") {
				b.WriteString("\n")
			}
		}
	}
	return []byte(b.String())
}
