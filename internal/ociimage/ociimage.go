// Package ociimage builds Gleaner's container images without a Docker engine
// or a base image: each is one layer holding a static binary, the CA
// certificates and a non-root user, with go-containerregistry writing the
// result as an OCI image layout (and pushing it to a registry).
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user and group every image runs as (distroless' nonroot).
const NonRoot = 65532

// CACertsPath is where the images hold the CA bundle: the first place Go's
// crypto/x509 looks on Linux.
const CACertsPath = "etc/ssl/certs/ca-certificates.crt"

// Meta describes a build, for the images' OCI labels.
type Meta struct {
	Version  string    // release or git description
	Revision string    // commit
	Source   string    // repository URL
	Created  time.Time // the commit's time, so that rebuilds are identical
}

// An image for an older Kubernetes minor than the default build's is named
// COMMAND-kubeMINOR (gleaner-scheduler-kube1.35) and holds COMMAND built for
// that minor (hack/minors), under COMMAND's own name: the chart runs
// /gleaner-scheduler whichever image it is given.
var minorImage = regexp.MustCompile(`^(.+)-kube(1\.[0-9]+)$`)

// Command is the command image name holds, and the Kubernetes minor it is
// built for ("" for the default build's).
func Command(name string) (command, minor string) {
	if m := minorImage.FindStringSubmatch(name); m != nil {
		return m[1], m[2]
	}
	return name, ""
}

// Image is one image built from a binary for one platform.
func Image(binary []byte, entrypoint string, platform v1.Platform, caCerts []byte, meta Meta) (v1.Image, error) {
	if len(caCerts) == 0 {
		return nil, errors.New("no CA certificates to put in the image")
	}
	if strings.Contains(entrypoint, "/") || entrypoint == "" {
		return nil, fmt.Errorf("entrypoint %q: want a bare file name", entrypoint)
	}
	layerTar, err := rootfs(binary, entrypoint, caCerts, meta.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: meta.Created}, CreatedBy: "gleaner hack/images: " + entrypoint + ", CA certificates, user nonroot",
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
	cfg.Created = v1.Time{Time: meta.Created}
	cfg.Config = v1.Config{
		Entrypoint: []string{"/" + entrypoint},
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		WorkingDir: "/",
		Env:        []string{"SSL_CERT_FILE=/" + CACertsPath},
		Labels: map[string]string{
			"org.opencontainers.image.title":    entrypoint,
			"org.opencontainers.image.version":  meta.Version,
			"org.opencontainers.image.revision": meta.Revision,
			"org.opencontainers.image.source":   meta.Source,
			"org.opencontainers.image.created":  meta.Created.UTC().Format(time.RFC3339),
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
	return mutate.ConfigFile(img, cfg)
}

// rootfs is the image's one layer: the binary at /name, the CA bundle, the
// nonroot user's passwd and group entries, and a world-writable /tmp.
func rootfs(binary []byte, name string, caCerts []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(p string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(p string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, err := range []error{
		dir("etc", 0o755),
		file("etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)),
		file("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", NonRoot)),
		dir("etc/ssl", 0o755),
		dir(path.Dir(CACertsPath), 0o755),
		file(CACertsPath, 0o644, caCerts),
		dir("home", 0o755),
		dir("tmp", 0o1777),
		file(name, 0o755, binary),
		tw.Close(),
	} {
		if err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// Index is a multi-platform image index of images, one per platform.
func Index(images []v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, img := range images {
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant},
		}})
	}
	return mutate.AppendManifests(idx, adds...), nil
}

// WriteLayout writes idx as the OCI image layout dir (replacing what was
// there), tagged tag.
func WriteLayout(dir string, idx v1.ImageIndex, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}

// ReadLayout is the image index WriteLayout wrote in dir.
func ReadLayout(dir string) (v1.ImageIndex, error) {
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d images, want 1", dir, len(m.Manifests))
	}
	return root.ImageIndex(m.Manifests[0].Digest)
}

// Push pushes idx to ref (registry/repository:tag) with the credentials of
// the user's Docker config, and returns the reference by digest.
func Push(idx v1.ImageIndex, ref string, opts ...name.Option) (string, error) {
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Digest(d.String()).String(), nil
}

// Built is DIR/images.json: what `make images` made, for push, release and
// the image test.
type Built struct {
	Version string           `json:"version"`
	Images  map[string]Entry `json:"images"`
}

// Entry is one image: its index digest and platforms.
type Entry struct {
	Digest    string   `json:"digest"`
	Platforms []string `json:"platforms"`
}

// Digests maps each image's name to its index digest.
func (b Built) Digests() map[string]string {
	d := make(map[string]string, len(b.Images))
	for name, e := range b.Images {
		d[name] = e.Digest
	}
	return d
}

// Write writes dir/images.json.
func (b Built) Write(dir string) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "images.json"), append(data, '\n'), 0o644)
}

// ReadBuilt reads dir/images.json.
func ReadBuilt(dir string) (Built, error) {
	var b Built
	data, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		return b, fmt.Errorf("%w: run `make images` first", err)
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("%s: %w", filepath.Join(dir, "images.json"), err)
	}
	return b, nil
}
