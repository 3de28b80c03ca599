// Package integration runs Gleaner against a real etcd and kube-apiserver in
// this process, with the stock default scheduler, gleaner-scheduler and the
// gleaner-controller. A small stand-in kubelet (kubelet_test.go) plays the
// part of the nodes' kubelets, which cannot run here.
package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"

	"github.com/gleaner-dev/gleaner/internal/manifests"
	"github.com/gleaner-dev/gleaner/pkg/api"
)

// controlPlane is a running etcd + kube-apiserver.
type controlPlane struct {
	config     *rest.Config
	client     kubernetes.Interface
	kubeconfig string // path to a kubeconfig file for components that load one
}

// startControlPlane starts etcd and kube-apiserver; extraFlags are added to the
// apiserver's (e.g. "--authorization-mode=RBAC").
func startControlPlane(t *testing.T, extraFlags ...string) *controlPlane {
	t.Helper()
	etcdCfg := testserver.NewTestConfig(t)
	testserver.RunEtcd(t, etcdCfg)
	flags := append([]string{
		"--endpoint-reconciler-type=none",
		// No service-account controller runs, and no node controller clears the
		// not-ready taint, so these two admission plugins would block pods.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
	}, extraFlags...)
	var cfg *rest.Config
	if minorBin() != "" {
		cfg = startMinorAPIServer(t, etcdCfg.ListenClientUrls[0].String(), flags)
	} else {
		storage := storagebackend.NewDefaultConfig("/registry", nil)
		storage.Transport.ServerList = []string{etcdCfg.ListenClientUrls[0].String()}
		server := kubeapiservertesting.StartTestServerOrDie(t, nil, flags, storage)
		t.Cleanup(server.TearDownFn)
		cfg = rest.CopyConfig(server.ClientConfig)
	}
	cfg.QPS, cfg.Burst = 200, 400
	client := kubernetes.NewForConfigOrDie(cfg)
	cp := &controlPlane{config: cfg, client: client, kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}
	writeKubeconfig(t, cfg, cp.kubeconfig)
	return cp
}

func writeKubeconfig(t *testing.T, cfg *rest.Config, path string) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.TLSClientConfig.CAData,
		CertificateAuthority:     cfg.TLSClientConfig.CAFile,
		InsecureSkipTLSVerify:    cfg.TLSClientConfig.Insecure,
		TLSServerName:            cfg.TLSClientConfig.ServerName,
	}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{
		Token:                 cfg.BearerToken,
		ClientCertificateData: cfg.TLSClientConfig.CertData,
		ClientKeyData:         cfg.TLSClientConfig.KeyData,
	}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("writing kubeconfig: %v", err)
	}
}

// createNamespace creates a namespace; servingNS is opted in as inference, as
// the admin labels it.
func createNamespace(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if name == servingNS {
		ns.Labels = map[string]string{api.LabelInferenceNamespace: "true"}
	}
	_, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// decodeObjects decodes every object of a multi-document YAML stream; what
// names the stream in errors. Empty documents are skipped.
func decodeObjects(t *testing.T, data []byte, what string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Decode(data)
	if err != nil {
		t.Fatalf("decoding %s: %v", what, err)
	}
	return objs
}

// readRepoObjects decodes every object of a YAML file in the repository, and
// fromUnstructured converts one to its typed form.
func readRepoObjects(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, data, rel)
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("converting %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// eventually polls cond every 100ms until it returns true or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, cond)
	if err != nil {
		t.Fatalf("waiting %s for %s: %v", timeout, what, err)
	}
}

// repoRoot finds the repository root from this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repository root not found from %s: %v", dir, err)
	}
	return dir
}
