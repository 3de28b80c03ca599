// Package manifests renders Gleaner's kustomize tree with the same kustomize
// library kubectl embeds, so `make manifests` and the tests need no kubectl.
package manifests

import (
	"fmt"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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
