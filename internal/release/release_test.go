package release

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/internal/chart"
	"github.com/gleaner-dev/gleaner/internal/manifests"
	"github.com/gleaner-dev/gleaner/internal/ociimage"
)

const chartDir = "../../charts/gleaner"

func objects(t *testing.T, stream []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Decode(stream)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// checkPinned checks that install runs the image of each component in
// components from registry by the digest digests gives it, and nothing else.
func checkPinned(t *testing.T, install []byte, registry string, digests map[string]string, components ...string) {
	t.Helper()
	var checked []string
	for _, o := range objects(t, install) {
		if o.GetKind() != "Deployment" {
			continue
		}
		key := strings.TrimPrefix(o.GetName(), "gleaner-")
		image, ok := Components[key]
		if !ok {
			t.Errorf("install.yaml's Deployment %s is no component's", o.GetName())
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		img, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
		if want := registry + "/" + image + "@" + digests[image]; img != want {
			t.Errorf("install.yaml runs %s as %q, want %s", o.GetName(), img, want)
		}
		checked = append(checked, key)
	}
	if slices.Sort(checked); !slices.Equal(checked, components) {
		t.Errorf("install.yaml runs the components %v, want %v", checked, components)
	}
}

// A release's install.yaml and packaged chart run exactly the images that
// were built, by digest, from the release's registry; the CRDs and
// PriorityClasses are apart in shared.yaml.
func TestReleasePinsTheBuiltImages(t *testing.T) {
	digests := map[string]string{
		"gleaner-scheduler":  "sha256:" + strings.Repeat("1a", 32),
		"gleaner-controller": "sha256:" + strings.Repeat("2b", 32),
		"kubectl-gleaner":    "sha256:" + strings.Repeat("3c", 32),
	}
	out := t.TempDir()
	pkg, err := PackageChart(chartDir, out, "v1.2.3", "registry.example.com/ml", digests)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(pkg) != "gleaner-1.2.3.tgz" {
		t.Errorf("packaged as %s", pkg)
	}
	ch, err := chart.LoadChart(pkg)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "1.2.3" || ch.Metadata.AppVersion != "v1.2.3" {
		t.Errorf("chart version %s, appVersion %s", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	shared, install, err := Manifests(pkg)
	if err != nil {
		t.Fatal(err)
	}
	checkPinned(t, install, "registry.example.com/ml", digests, "controller", "scheduler")
	// The console, off by default, is pinned too when an admin turns it on.
	withConsole, err := chart.RenderChart(pkg, map[string]any{"console": map[string]any{"enabled": true, "namespaces": []any{"research"}}}, chart.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	checkPinned(t, withConsole.YAML(), "registry.example.com/ml", digests, "console", "controller", "scheduler")
	kinds := map[string]bool{}
	for _, o := range objects(t, install) {
		kinds[o.GetKind()] = true
	}
	if !kinds["Namespace"] || kinds["CustomResourceDefinition"] || kinds["PriorityClass"] {
		t.Errorf("install.yaml holds %v: want the Namespace, and no CRD or PriorityClass", kinds)
	}
	sharedKinds := map[string]int{}
	for _, o := range objects(t, shared) {
		sharedKinds[o.GetKind()]++
	}
	// The PodGroup, GPUPool and HarvestReport CRDs, and both PriorityClasses.
	if sharedKinds["CustomResourceDefinition"] != 3 || sharedKinds["PriorityClass"] != 2 || len(sharedKinds) != 2 {
		t.Errorf("shared.yaml holds %v", sharedKinds)
	}

	if err := Checksums(out, []string{filepath.Base(pkg)}); err != nil {
		t.Fatal(err)
	}
	sums, _ := os.ReadFile(filepath.Join(out, "checksums.txt"))
	if !strings.HasSuffix(string(sums), "  gleaner-1.2.3.tgz\n") || len(strings.Fields(string(sums))[0]) != 64 {
		t.Errorf("checksums.txt: %q", sums)
	}
}

// Nothing ships half pinned: a missing digest, a reshaped values.yaml or a
// bad version stops the release.
func TestReleaseRefusesToPinHalfway(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	full := map[string]string{"gleaner-scheduler": "sha256:" + strings.Repeat("1a", 32), "gleaner-controller": "sha256:" + strings.Repeat("2b", 32), "kubectl-gleaner": "sha256:" + strings.Repeat("3c", 32)}
	if _, err := PinValues(values, "r", "v1.0.0", map[string]string{"gleaner-scheduler": full["gleaner-scheduler"], "gleaner-controller": full["gleaner-controller"]}); err == nil || !strings.Contains(err.Error(), "no digest for image kubectl-gleaner") {
		t.Errorf("a missing digest: %v", err)
	}
	reshaped := bytes.Replace(values, []byte("    name: gleaner-controller\n"), []byte("    name: controller\n"), 1)
	if _, err := PinValues(reshaped, "r", "v1.0.0", full); err == nil || !strings.Contains(err.Error(), "controller.image.digest found 0 times") {
		t.Errorf("a reshaped values.yaml: %v", err)
	}
	if _, err := PackageChart(chartDir, t.TempDir(), "1.0", "r", full); err == nil {
		t.Error("version 1.0 was accepted")
	}
}

// With the images `make images` really built (GLEANER_IMAGES), the release's
// install.yaml runs exactly their digests.
func TestReleaseOfBuiltImages(t *testing.T) {
	dir := os.Getenv("GLEANER_IMAGES")
	if dir == "" {
		t.Skip("GLEANER_IMAGES is not set: `make test-images` builds the images and runs this test on them")
	}
	built, err := ociimage.ReadBuilt(dir)
	if err != nil {
		t.Fatal(err)
	}
	digests := built.Digests()
	pkg, err := PackageChart(chartDir, t.TempDir(), "v0.0.0-test", "registry.example.com/ml", digests)
	if err != nil {
		t.Fatal(err)
	}
	_, install, err := Manifests(pkg)
	if err != nil {
		t.Fatal(err)
	}
	checkPinned(t, install, "registry.example.com/ml", digests, "controller", "scheduler")
}

// The krew manifest names one archive per platform, each with its checksum
// and the plugin's binary, and refuses what krew would.
func TestKrewManifest(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	raw, err := KrewManifest("v0.1.0", []KrewArchive{
		{OS: "linux", Arch: "amd64", URI: "https://example.com/v0.1.0/kubectl-gleaner_v0.1.0_linux_amd64.tar.gz", SHA256: sum},
		{OS: "darwin", Arch: "arm64", URI: "https://example.com/v0.1.0/kubectl-gleaner_v0.1.0_darwin_arm64.tar.gz", SHA256: sum},
	})
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name string }
		Spec       struct {
			Version, Homepage, ShortDescription, Description string
			Platforms                                        []struct {
				Selector         struct{ MatchLabels map[string]string }
				URI, SHA256, Bin string
			}
		}
	}
	if err := yaml.UnmarshalStrict(raw, &m); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "gleaner" || m.Spec.Version != "v0.1.0" {
		t.Errorf("manifest head: %s", raw)
	}
	if len(m.Spec.Platforms) != 2 || m.Spec.Platforms[1].Selector.MatchLabels["os"] != "darwin" || m.Spec.Platforms[1].Bin != "kubectl-gleaner" || m.Spec.Platforms[0].SHA256 != sum {
		t.Errorf("platforms: %+v", m.Spec.Platforms)
	}
	for _, bad := range [][]KrewArchive{nil, {{OS: "linux", Arch: "amd64", URI: "u", SHA256: "short"}}} {
		if _, err := KrewManifest("v0.1.0", bad); err == nil {
			t.Errorf("archives %+v accepted", bad)
		}
	}
	if _, err := KrewManifest("latest", nil); err == nil {
		t.Error("version latest accepted")
	}
}
