package ociimage

import (
	"archive/tar"
	"errors"
	"io"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// files lists the image's filesystem: path to content (nil for directories).
func files(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		p := strings.TrimSuffix(h.Name, "/")
		if h.Typeflag == tar.TypeDir {
			out[p] = nil
			continue
		}
		if h.Typeflag != tar.TypeReg {
			t.Errorf("%s is not a plain file or directory (type %c)", h.Name, h.Typeflag)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = data
	}
}

// checkImage checks what every Gleaner image must be: its binary as the
// entrypoint, a non-root user, the CA bundle, no shell or anything else, and
// the labels. When the image is for this machine it runs the binary taken out
// of the layer with --version, which must name wantVersion. It returns that
// output ("" when not run).
func checkImage(t *testing.T, img v1.Image, binary, wantVersion string) string {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; !slices.Equal(got, []string{"/" + binary}) {
		t.Errorf("%s: entrypoint %v", binary, got)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("%s: runs as %q, want 65532:65532", binary, cfg.Config.User)
	}
	for _, l := range []string{"org.opencontainers.image.source", "org.opencontainers.image.version", "org.opencontainers.image.title"} {
		if cfg.Config.Labels[l] == "" {
			t.Errorf("%s: no label %s", binary, l)
		}
	}
	if v := cfg.Config.Labels["org.opencontainers.image.version"]; v != wantVersion {
		t.Errorf("%s: version label %q, want %q", binary, v, wantVersion)
	}
	fs := files(t, img)
	want := []string{"etc", "etc/passwd", "etc/group", "etc/ssl", "etc/ssl/certs", CACertsPath, "home", "tmp", binary}
	got := slices.Sorted(maps.Keys(fs))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: files %v, want exactly %v (no shell, nothing else)", binary, got, want)
	}
	if !strings.Contains(string(fs["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd has no nonroot user: %q", binary, fs["etc/passwd"])
	}
	if !strings.Contains(string(fs[CACertsPath]), "BEGIN CERTIFICATE") {
		t.Errorf("%s: no CA certificates in /%s", binary, CACertsPath)
	}
	if cfg.OS != runtime.GOOS || cfg.Architecture != runtime.GOARCH {
		return ""
	}
	exe := filepath.Join(t.TempDir(), binary)
	if err := os.WriteFile(exe, fs[binary], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version from the image: %v\n%s", binary, err, out)
	}
	if !strings.Contains(string(out), "gleaner "+wantVersion+" (commit ") {
		t.Errorf("%s --version from the image printed %q, want Gleaner's version %s", binary, out, wantVersion)
	}
	return string(out)
}

// A real Gleaner binary, built as `make images` builds it, goes into an image
// that checks out, survives the OCI layout and a push to a registry
// unchanged, and runs from its layer.
func TestImageFromABinary(t *testing.T) {
	certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skipf("no CA bundle on this machine (%v): apt-get install ca-certificates", err)
	}
	dir := t.TempDir()
	const version = "v0.0.0-test"
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/gleaner-dev/gleaner/pkg/version.Version="+version,
		"-o", dir+"/", "github.com/gleaner-dev/gleaner/cmd/gleaner-train-example")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	binary, err := os.ReadFile(filepath.Join(dir, "gleaner-train-example"))
	if err != nil {
		t.Fatal(err)
	}
	meta := Meta{Version: version, Revision: "abc", Source: "https://example.com/gleaner", Created: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	host := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	img, err := Image(binary, "gleaner-train-example", host, certs, meta)
	if err != nil {
		t.Fatal(err)
	}
	if out := checkImage(t, img, "gleaner-train-example", version); out == "" {
		t.Fatal("the image for this machine's platform was not run")
	}
	// Built twice from the same inputs, the image is the same image.
	again, err := Image(binary, "gleaner-train-example", host, certs, meta)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same binary differ: %s and %s", d1, d2)
	}

	idx, err := Index([]v1.Image{img})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	layoutDir := filepath.Join(dir, "layout")
	if err := WriteLayout(layoutDir, idx, version); err != nil {
		t.Fatal(err)
	}
	read, err := ReadLayout(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := read.Digest(); got != want {
		t.Errorf("the layout holds %s, wrote %s", got, want)
	}
	m, _ := read.IndexManifest()
	if len(m.Manifests) != 1 || m.Manifests[0].Platform == nil || m.Manifests[0].Platform.Architecture != runtime.GOARCH {
		t.Errorf("index manifests %+v", m.Manifests)
	}

	// A registry (go-containerregistry's, in-process) gets the same index.
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host2 := strings.TrimPrefix(srv.URL, "http://")
	ref, err := Push(read, host2+"/gleaner/gleaner-train-example:"+version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(ref, "@"+want.String()) {
		t.Errorf("pushed as %s, want digest %s", ref, want)
	}
	tag, err := name.ParseReference(host2+"/gleaner/gleaner-train-example:"+version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("the registry serves %s, pushed %s", got, want)
	}

	if _, err := Image(binary, "bin/sh", host, certs, meta); err == nil {
		t.Error("an entrypoint with a path was accepted")
	}
	if _, err := Image(binary, "x", host, nil, meta); err == nil {
		t.Error("an image without CA certificates was accepted")
	}
}

// The images `make images` wrote (GLEANER_IMAGES names their directory):
// each layout holds the index images.json names, every platform's image checks
// out, and this machine's runs from its layer with --version.
func TestBuiltImages(t *testing.T) {
	dir := os.Getenv("GLEANER_IMAGES")
	if dir == "" {
		t.Skip("GLEANER_IMAGES is not set: `make test-images` builds the images and runs this test on them")
	}
	built, err := ReadBuilt(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gleaner-scheduler", "gleaner-controller", "kubectl-gleaner", "gleaner", "gleaner-train-example"} {
		if _, ok := built.Images[want]; !ok {
			t.Errorf("no image %s in %s/images.json", want, dir)
		}
	}
	ran := 0
	for n, e := range built.Images {
		idx, err := ReadLayout(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := idx.Digest(); d.String() != e.Digest {
			t.Errorf("%s: the layout holds %s, images.json says %s", n, d, e.Digest)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var platforms []string
		for _, desc := range m.Manifests {
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			platforms = append(platforms, desc.Platform.OS+"/"+desc.Platform.Architecture)
			command, minor := Command(n)
			if out := checkImage(t, img, command, built.Version); out != "" {
				ran++
				// An older minor's scheduler says it is kube-scheduler of that minor.
				if minor != "" && !strings.Contains(out, "kube-scheduler v"+minor+".") {
					t.Errorf("%s --version printed %q, want kube-scheduler v%s.x", n, out, minor)
				}
				t.Logf("%s (%s) --version: %s", n, desc.Platform.Architecture, strings.TrimSpace(out))
			}
		}
		if !slices.Equal(platforms, e.Platforms) {
			t.Errorf("%s: platforms %v, images.json says %v", n, platforms, e.Platforms)
		}
	}
	if ran < len(built.Images) {
		t.Errorf("ran %d of %d images' binaries: build for this machine's platform too", ran, len(built.Images))
	}
}
