// Command release writes a release's artefacts into dist/ (`make release
// VERSION=vX.Y.Z`, after `make images` for that version):
//
//   - gleaner-X.Y.Z.tgz: the chart, versioned, its images pinned by digest;
//   - shared.yaml and install.yaml: the same, for kubectl apply -f;
//   - gleaner_vX.Y.Z_OS_ARCH.tar.gz and kubectl-gleaner_vX.Y.Z_OS_ARCH.tar.gz:
//     the CLI and the kubectl plugin for linux and darwin, amd64 and arm64;
//   - gleaner.yaml: the kubectl plugin's krew manifest;
//   - checksums.txt: the SHA-256 of each, and of images/images.json.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
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
	downloads := flag.String("downloads", "https://github.com/gleaner-dev/gleaner/releases/download", "where the release's archives are published, for the krew manifest: DOWNLOADS/VERSION/ARCHIVE")
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
	var krew []release.KrewArchive
	for _, p := range cliPlatforms {
		for _, command := range []string{"gleaner", "kubectl-gleaner"} {
			name, sum, err := archive(*out, *version, p, *ldflags, command)
			if err != nil {
				return err
			}
			files = append(files, name)
			if command == "kubectl-gleaner" {
				goos, goarch, _ := strings.Cut(p, "/")
				krew = append(krew, release.KrewArchive{OS: goos, Arch: goarch, URI: *downloads + "/" + *version + "/" + name, SHA256: sum})
			}
		}
	}
	manifest, err := release.KrewManifest(*version, krew)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "gleaner.yaml"), manifest, 0o644); err != nil {
		return err
	}
	files = append(files, "gleaner.yaml")
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

// archive builds command for platform (OS/ARCH) and packs it as
// COMMAND_VERSION_OS_ARCH.tar.gz in out; it returns the archive's name and
// SHA-256.
func archive(out, version, platform, ldflags, command string) (string, string, error) {
	goos, goarch, _ := strings.Cut(platform, "/")
	dir, err := os.MkdirTemp("", "gleaner-cli")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dir)
	if err := release.Build(dir, goos, goarch, ldflags, command); err != nil {
		return "", "", err
	}
	binary, err := os.ReadFile(filepath.Join(dir, command))
	if err != nil {
		return "", "", err
	}
	name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", command, version, goos, goarch)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err = errors.Join(
		tw.WriteHeader(&tar.Header{Name: command, Mode: 0o755, Size: int64(len(binary)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}),
		func() error { _, err := tw.Write(binary); return err }(),
		tw.Close(), gz.Close())
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return name, hex.EncodeToString(sum[:]), os.WriteFile(filepath.Join(out, name), buf.Bytes(), 0o644)
}
