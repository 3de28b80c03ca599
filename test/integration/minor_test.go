package integration

// An older Kubernetes minor's control plane. With GLEANER_MINOR_BIN set to a
// directory holding that minor's kube-apiserver and gleaner-scheduler (built
// by `make test-minors` from hack/minors), the control plane is that
// kube-apiserver, run as a process over an etcd in this one, and every
// scheduler is that gleaner-scheduler, run as a process: upstream's skew
// policy allows no kube-scheduler newer than its API server. The controller,
// one build for every supported minor, runs as always. Only the tests `make
// test-minors` names are meant to run this way; the others reach into the
// in-process scheduler.

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

// minorBin is GLEANER_MINOR_BIN: "" runs the newest minor, in this process.
func minorBin() string { return os.Getenv("GLEANER_MINOR_BIN") }

// startMinorAPIServer runs the older minor's kube-apiserver over the etcd at
// etcdURL, with the flags the in-process test server is given, and a token
// for a member of system:masters.
func startMinorAPIServer(t *testing.T, etcdURL string, flags []string) *rest.Config {
	t.Helper()
	dir := t.TempDir()
	token := "admin-" + fmt.Sprint(time.Now().UnixNano())
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	saKey := filepath.Join(dir, "sa.key")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(saKey, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	// A serving certificate signed by a CA of its own, which clients trust
	// (the install test hands it to every ServiceAccount's kubeconfig).
	servingCert, servingKey, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	for path, data := range map[string][]byte{certFile: servingCert, keyFile: servingKey} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	args := append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + certFile,
		"--tls-private-key-file=" + keyFile,
		"--token-auth-file=" + tokens,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.0.0.0/16",
	}, flags...)
	p := startProcess(t, "kube-apiserver", filepath.Join(minorBin(), "kube-apiserver"), args...)
	cfg := &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", port), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: servingCert}}
	client := kubernetes.NewForConfigOrDie(cfg)
	eventually(t, 90*time.Second, "the older minor's kube-apiserver to be ready", func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("kube-apiserver exited:\n%s", p.tail())
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok", nil
	})
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane: kube-apiserver %s from %s", v.GitVersion, minorBin())
	return cfg
}

// startMinorScheduler runs the older minor's gleaner-scheduler on config
// (a KubeSchedulerConfiguration) against cp, without leader election; stop
// ends it.
func startMinorScheduler(t *testing.T, name string, cp *controlPlane, config []byte) (stop func()) {
	t.Helper()
	path := writeSchedulerConfig(t, config, cp.kubeconfig, map[string]any{"leaderElect": false})
	p := startProcess(t, name, filepath.Join(minorBin(), "gleaner-scheduler"), "--config="+path, "--secure-port=0")
	var once sync.Once
	return func() {
		once.Do(func() {
			if !p.exited() {
				p.stop(t)
			}
		})
	}
}
