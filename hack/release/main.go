// Command release writes a release's artefacts into dist/ (`make release
// VERSION=vX.Y.Z`, after `make images` for that version):
//
//   - gleaner-X.Y.Z.tgz: the chart, versioned, its images pinned by digest;
//   - shared.yaml and install.yaml: the same, for kubectl apply -f;
//   - gleaner_vX.Y.Z_OS_ARCH.tar.gz: the CLI for linux and darwin, amd64 and arm64;
//   - checksums.txt: the SHA-256 of each, and of images/images.json.
package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gleaner-dev/gleaner/internal/ociimage"
	"github.com/gleaner-dev/gleaner/internal/release"
)

// cliPlatforms are where the CLI runs: researchers' and admins' machines.
var cliPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run() error {
	version := flag.String("version", "", "release version, vX.Y.Z")
	out := flag.String("out", "dist", "output directory")
	images := flag.String("images", "dist/images", "what `make images` wrote")
	registry := flag.String("registry", "ghcr.io/gleaner-dev", "registry the images are pushed to (make push REGISTRY=...)")
	ldflags := flag.String("ldflags", "", "go build -ldflags")
	flag.Parse()
	if !release.Version.MatchString(*version) {
		return fmt.Errorf("--version %q: want vMAJOR.MINOR.PATCH (make release VERSION=v0.1.0)", *version)
	}
	built, err := ociimage.ReadBuilt(*images)
	if err != nil {
		return err
	}
	if built.Version != *version {
		return fmt.Errorf("%s/images.json is version %q, not %s: run `make images VERSION=%s`", *images, built.Version, *version, *version)
	}
	digests := built.Digests()
	chart, err := release.PackageChart("charts/gleaner", *out, *version, *registry, digests)
	if err != nil {
		return err
	}
	shared, install, err := release.Manifests(chart)
	if err != nil {
		return err
	}
	files := []string{filepath.Base(chart), "shared.yaml", "install.yaml"}
	for name, data := range map[string][]byte{"shared.yaml": shared, "install.yaml": install} {
		if err := os.WriteFile(filepath.Join(*out, name), data, 0o644); err != nil {
			return err
		}
	}
	for _, p := range cliPlatforms {
		name, err := cli(*out, *version, p, *ldflags)
		if err != nil {
			return err
		}
		files = append(files, name)
	}
	rel, err := filepath.Rel(*out, filepath.Join(*images, "images.json"))
	if err != nil {
		return err
	}
	files = append(files, rel)
	if err := release.Checksums(*out, files); err != nil {
		return err
	}
	for _, f := range append(files, "checksums.txt") {
		fmt.Println(filepath.Join(*out, f))
	}
	return nil
}

// cli builds the gleaner CLI for platform (OS/ARCH) and packs it as
// gleaner_VERSION_OS_ARCH.tar.gz in out.
func cli(out, version, platform, ldflags string) (string, error) {
	goos, goarch, _ := strings.Cut(platform, "/")
	dir, err := os.MkdirTemp("", "gleaner-cli")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := release.Build(dir, goos, goarch, ldflags, "gleaner"); err != nil {
		return "", err
	}
	binary, err := os.ReadFile(filepath.Join(dir, "gleaner"))
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("gleaner_%s_%s_%s.tar.gz", version, goos, goarch)
	f, err := os.Create(filepath.Join(out, name))
	if err != nil {
		return "", err
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	err = errors.Join(
		tw.WriteHeader(&tar.Header{Name: "gleaner", Mode: 0o755, Size: int64(len(binary)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}),
		func() error { _, err := tw.Write(binary); return err }(),
		tw.Close(), gz.Close(), f.Close())
	return name, err
}
