package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/gleaner-dev/gleaner/internal/manifests"
	"github.com/gleaner-dev/gleaner/pkg/api"
)

// Namespaces of the demo's workloads.
const (
	servingNS  = "serving"
	researchNS = "research"
)

func decodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	objs, err := manifests.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("decoding the rendered manifests: %w", err)
	}
	return objs, nil
}

// installGleanerAPIs applies the shipped Namespace, PriorityClasses, PodGroup
// CRD, ServiceAccounts, RBAC and the scheduler's ConfigMap (the controller
// checks its own flags against it) with server-side apply. The components'
// Deployments and Services are not applied: here they run as local
// processes, with their ServiceAccounts' tokens.
func installGleanerAPIs(ctx context.Context, c *cluster, objs []*unstructured.Unstructured) error {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.client.Discovery()))
	dyn, err := dynamic.NewForConfig(c.config)
	if err != nil {
		return err
	}
	kinds := []string{"Namespace", "PriorityClass", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap"}
	for _, kind := range kinds {
		for _, obj := range objs {
			if obj.GetKind() != kind {
				continue
			}
			gvk := obj.GroupVersionKind()
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("%s %s: %w", kind, obj.GetName(), err)
			}
			data, err := runtime.Encode(unstructured.UnstructuredJSONScheme, obj)
			if err != nil {
				return err
			}
			force := true
			var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
			if ns := obj.GetNamespace(); ns != "" {
				res = dyn.Resource(mapping.Resource).Namespace(ns)
			}
			if _, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data,
				metav1.PatchOptions{FieldManager: "gleaner-demo", Force: &force, FieldValidation: "Strict"}); err != nil {
				return fmt.Errorf("applying %s %s: %w", kind, obj.GetName(), err)
			}
		}
	}
	for _, ns := range []*v1.Namespace{
		// The admin opts the inference namespace in; research is a tenant's.
		{ObjectMeta: metav1.ObjectMeta{Name: servingNS, Labels: map[string]string{api.LabelInferenceNamespace: "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: researchNS}},
	} {
		if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	// Wait until PodGroups are served.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mapper.Reset()
		if _, err := mapper.RESTMapping(schema.GroupKind{Group: "scheduling.x-k8s.io", Kind: "PodGroup"}); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the PodGroup CRD from manifests/shared was not served within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
