// Package manifests renders Gleaner's kustomize tree (manifests/, generated
// from the chart by package chart) with the kustomize library kubectl embeds,
// so `make manifests`, the demo and the tests need no kubectl.
package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Render builds the kustomization in dir and returns multi-document YAML.
func Render(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("rendering kustomization %s: %w", dir, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("rendering kustomization %s as YAML: %w", dir, err)
	}
	return out, nil
}

// RenderInstall renders what an install applies, in order: manifests/shared
// (CRDs and PriorityClasses), then manifests/ itself.
func RenderInstall(manifestsDir string) ([]byte, error) {
	shared, err := Render(filepath.Join(manifestsDir, "shared"))
	if err != nil {
		return nil, err
	}
	own, err := Render(manifestsDir)
	if err != nil {
		return nil, err
	}
	return append(append(shared, "---\n"...), own...), nil
}

// SchedulerConfig is gleaner-scheduler's KubeSchedulerConfiguration as
// manifests/ ships it: the config.yaml of its ConfigMap.
func SchedulerConfig(manifestsDir string) ([]byte, error) {
	p := filepath.Join(manifestsDir, "base", "scheduler", "config.yaml")
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var cm struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	config, ok := cm.Data["config.yaml"]
	if cm.Kind != "ConfigMap" || !ok {
		return nil, fmt.Errorf("%s is not a ConfigMap with a config.yaml", p)
	}
	return []byte(config), nil
}

// Decode splits a YAML stream into objects, numbers as int64 as the API
// machinery has them; empty documents are skipped.
func Decode(stream []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		var raw json.RawMessage
		if err := d.Decode(&raw); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
}
