// Command images builds Gleaner's container images without a Docker engine
// (`make images`) and pushes them (`make push REGISTRY=...`).
//
//	go run ./hack/images build --out dist/images --version v0.1.0 --platforms linux/amd64,linux/arm64 gleaner-scheduler ...
//	go run ./hack/images push --out dist/images --registry registry.example.com/gleaner
//
// build compiles each command under cmd/ as a static binary per platform
// (CGO_ENABLED=0, -trimpath, the Makefile's -ldflags), makes one image per
// command (ociimage.Image; COMMAND-kube1.35 is COMMAND built for Kubernetes
// 1.35, ociimage.Command), and writes each as an OCI image layout
// OUT/NAME holding a multi-platform index, plus OUT/images.json with every
// index digest (which `make release` pins in install.yaml).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gleaner-dev/gleaner/internal/ociimage"
	"github.com/gleaner-dev/gleaner/internal/release"
)

// Source is the repository the images' labels name.
const Source = "https://github.com/gleaner-dev/gleaner"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: images build|push [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	out := fs.String("out", "dist/images", "directory of the OCI image layouts")
	version := fs.String("version", "dev", "version for the tag and labels")
	ldflags := fs.String("ldflags", "", "go build -ldflags")
	platforms := fs.String("platforms", "linux/"+runtime.GOARCH, "comma-separated OS/ARCH list")
	caCerts := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put in the images")
	if err := fs.Parse(args); err != nil {
		return err
	}
	names := fs.Args()
	if len(names) == 0 {
		return errors.New("build: name at least one command under cmd/")
	}
	certs, err := os.ReadFile(*caCerts)
	if err != nil {
		return fmt.Errorf("--ca-certs: %w (on Debian: apt-get install ca-certificates)", err)
	}
	meta := ociimage.Meta{Version: *version, Source: Source, Revision: git("rev-parse", "HEAD"), Created: time.Unix(0, 0).UTC()}
	if sec, err := strconv.ParseInt(git("log", "-1", "--format=%ct"), 10, 64); err == nil {
		meta.Created = time.Unix(sec, 0).UTC()
	}
	built := ociimage.Built{Version: *version, Images: map[string]ociimage.Entry{}}
	images := map[string][]v1.Image{}
	for _, p := range strings.Split(*platforms, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || osName != "linux" || arch == "" {
			return fmt.Errorf("--platforms: %q is not linux/ARCH", p)
		}
		binDir, err := os.MkdirTemp("", "gleaner-images-"+arch)
		if err != nil {
			return err
		}
		defer os.RemoveAll(binDir)
		start := time.Now()
		// Each older minor's image has its binary built into a directory of
		// its own, under the command's name.
		binaries := map[string]string{}
		var plain []string
		for _, n := range names {
			command, minor := ociimage.Command(n)
			if minor == "" {
				plain = append(plain, n)
				binaries[n] = filepath.Join(binDir, n)
				continue
			}
			if err := release.BuildMinor(filepath.Join(binDir, n), osName, arch, *ldflags, minor, "github.com/gleaner-dev/gleaner/cmd/"+command); err != nil {
				return err
			}
			binaries[n] = filepath.Join(binDir, n, command)
		}
		if len(plain) > 0 {
			if err := release.Build(binDir, osName, arch, *ldflags, plain...); err != nil {
				return err
			}
		}
		fmt.Printf("built %s for %s in %v\n", strings.Join(names, ", "), p, time.Since(start).Round(time.Second))
		for _, n := range names {
			binary, err := os.ReadFile(binaries[n])
			if err != nil {
				return err
			}
			command, _ := ociimage.Command(n)
			img, err := ociimage.Image(binary, command, v1.Platform{OS: osName, Architecture: arch}, certs, meta)
			if err != nil {
				return fmt.Errorf("%s for %s: %w", n, p, err)
			}
			images[n] = append(images[n], img)
			e := built.Images[n]
			e.Platforms = append(e.Platforms, osName+"/"+arch)
			built.Images[n] = e
		}
	}
	for _, n := range names {
		idx, err := ociimage.Index(images[n])
		if err != nil {
			return err
		}
		if err := ociimage.WriteLayout(filepath.Join(*out, n), idx, *version); err != nil {
			return fmt.Errorf("writing %s: %w", n, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		e := built.Images[n]
		e.Digest = d.String()
		built.Images[n] = e
		fmt.Printf("%s/%s: %s %v\n", *out, n, d, e.Platforms)
	}
	return built.Write(*out)
}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	out := fs.String("out", "dist/images", "directory of the OCI image layouts")
	registry := fs.String("registry", "", "registry and path to push to, e.g. registry.example.com/gleaner")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *registry == "" {
		return errors.New("push: --registry is required (make push REGISTRY=registry.example.com/gleaner)")
	}
	b, err := ociimage.ReadBuilt(*out)
	if err != nil {
		return err
	}
	for n := range b.Images {
		idx, err := ociimage.ReadLayout(filepath.Join(*out, n))
		if err != nil {
			return err
		}
		ref, err := ociimage.Push(idx, strings.TrimSuffix(*registry, "/")+"/"+n+":"+b.Version)
		if err != nil {
			return err
		}
		fmt.Println(ref)
	}
	return nil
}

// git runs git in the working directory; empty when it cannot.
func git(args ...string) string {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
