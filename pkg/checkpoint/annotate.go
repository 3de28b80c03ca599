package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// PodAnnotator records the time of a pod's last checkpoint in its
// api.AnnotationLastCheckpoint annotation, and how long its saves take in
// api.AnnotationSaveDuration. Gleaner's reclaimer reads them to evict the
// pods that lose the least work first, and to give a pod it takes before it
// saved for a notice no longer than its save needs.
type PodAnnotator struct {
	client    kubernetes.Interface
	namespace string
	name      string
}

// NewPodAnnotator annotates pod namespace/name through client.
func NewPodAnnotator(client kubernetes.Interface, namespace, name string) *PodAnnotator {
	return &PodAnnotator{client: client, namespace: namespace, name: name}
}

// PodAnnotatorFromEnv builds an annotator for the pod this process runs in,
// named by POD_NAME and POD_NAMESPACE (set them from the downward API). It
// connects with kubeconfig if given, else with the in-cluster config. Outside a
// cluster, with no kubeconfig, it returns nil and no error: there is no pod to
// annotate. In a cluster without POD_NAME/POD_NAMESPACE it returns an error
// saying what to add to the pod spec.
func PodAnnotatorFromEnv(kubeconfig string) (*PodAnnotator, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("loading Kubernetes client config to annotate this pod: %w", err)
	}
	name, namespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || namespace == "" {
		return nil, fmt.Errorf("running in a cluster but POD_NAME or POD_NAMESPACE is unset, so %s cannot be recorded: "+
			"set them from the downward API (fieldRef metadata.name and metadata.namespace)", api.AnnotationLastCheckpoint)
	}
	cfg.UserAgent = "gleaner-checkpoint"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building Kubernetes client: %w", err)
	}
	return NewPodAnnotator(client, namespace, name), nil
}

// Record sets the annotations to t in RFC 3339 (UTC, whole seconds, the
// form the reclaimer parses) and to took, how long the run takes to save
// once asked to stop. A merge patch touches only these two annotations.
func (a *PodAnnotator) Record(ctx context.Context, t time.Time, took time.Duration) error {
	_, err := a.client.CoreV1().Pods(a.namespace).Patch(ctx, a.name, types.MergePatchType, api.CheckpointPatch(t, took), metav1.PatchOptions{FieldManager: "gleaner-checkpoint"})
	if err != nil {
		return fmt.Errorf("annotating pod %s/%s with %s (the pod's service account needs 'patch' on pods): %w",
			a.namespace, a.name, api.AnnotationLastCheckpoint, err)
	}
	return nil
}
