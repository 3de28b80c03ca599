package checkpoint

import "testing"

// Outside a cluster there is no pod to annotate: no annotator and no error, so
// the same binary runs on a laptop. (Annotating a real pod is tested against a
// real apiserver in test/integration.)
func TestPodAnnotatorFromEnvOutsideCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	a, err := PodAnnotatorFromEnv("")
	if a != nil || err != nil {
		t.Fatalf("PodAnnotatorFromEnv outside a cluster = %v, %v; want nil, nil", a, err)
	}
}
