package demo

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

//go:embed kwok-stages.yaml
var kwokStages []byte

// kwokPodCIDR gives every pod a loopback address, so that one vllm-sim
// listener on 0.0.0.0 answers every inference pod's scrape.
const kwokPodCIDR = "127.42.0.0/16"

// cluster is the local control plane and Gleaner's components, all processes.
type cluster struct {
	sup        *supervisor
	dir        string // state and config files
	kubeconfig string
	config     *rest.Config
	client     kubernetes.Interface
	simPort    int // vllm-sim: pods' metrics port, and its control endpoint on 127.0.0.1
	procs      map[string]*proc
}

// startControlPlane starts etcd and kube-apiserver and waits until the apiserver is ready.
func (c *cluster) startControlPlane(ctx context.Context, tools string) error {
	etcdClient, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	etcdPeer, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	apiPort, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if c.procs["etcd"], err = c.sup.start("etcd", filepath.Join(tools, "localcluster"), "etcd",
		"--name=demo", "--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=demo="+peerURL,
		"--unsafe-no-fsync", // a throw-away cluster: spare the shared disk
		"--log-level=warn"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, c.procs["etcd"], etcdURL+"/health", "", 30*time.Second); err != nil {
		return err
	}

	token, err := randomHex(16)
	if err != nil {
		return err
	}
	pki := filepath.Join(c.dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	tokens := filepath.Join(pki, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,demo-admin,demo-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	saKey := filepath.Join(pki, "service-account.key")
	if err := writeRSAKey(saKey); err != nil {
		return err
	}
	if c.procs["kube-apiserver"], err = c.sup.start("kube-apiserver", filepath.Join(tools, "localcluster"), "kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir="+pki, // self-signed serving certificate
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saKey, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
		// No service-account or node-lifecycle controller runs: these would block pods.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--profiling=false"); err != nil {
		return err
	}
	host := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	if err := waitHTTP(ctx, c.procs["kube-apiserver"], host+"/readyz", token, 90*time.Second); err != nil {
		return err
	}
	c.config = &rest.Config{Host: host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 100, Burst: 200}
	c.client, err = kubernetes.NewForConfig(c.config)
	if err != nil {
		return err
	}
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	return writeKubeconfig(c.config, c.kubeconfig)
}

// startComponents starts everything but the control plane.
func (c *cluster) startComponents(ctx context.Context, cfg Config, t timing, objs []*unstructured.Unstructured) error {
	var err error
	tools := cfg.ToolsDir
	kc := "--kubeconfig=" + c.kubeconfig
	// kube-controller-manager's Deployment and ReplicaSet controllers, the
	// only ones the demo needs (hack/localcluster).
	if c.procs["kube-controllers"], err = c.sup.start("kube-controllers", filepath.Join(tools, "localcluster"), "controllers",
		kc, "--workers=2"); err != nil {
		return err
	}
	// The cluster's default scheduler: gleaner-scheduler is kube-scheduler,
	// and without a profile of its own it runs the default one.
	if c.procs["kube-scheduler"], err = c.sup.start("kube-scheduler", filepath.Join(cfg.BinDir, "gleaner-scheduler"),
		kc, "--leader-elect=false", "--secure-port=0"); err != nil {
		return err
	}
	stages := filepath.Join(c.dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, kwokStages, 0o600); err != nil {
		return err
	}
	if c.procs["kwok"], err = c.sup.start("kwok", filepath.Join(tools, "localcluster"), "kwok",
		kc, "--manage-all-nodes=true", "--cidr="+kwokPodCIDR, "--config="+stages, "--node-lease-duration-seconds=0"); err != nil {
		return err
	}
	if c.simPort, err = freePort("0.0.0.0"); err != nil {
		return err
	}
	if c.procs["vllm-sim"], err = c.sup.start("vllm-sim", filepath.Join(cfg.BinDir, "gleaner"),
		"vllm-sim", fmt.Sprintf("--listen=0.0.0.0:%d", c.simPort)); err != nil {
		return err
	}

	// Gleaner's components run with their ServiceAccounts' tokens, so exactly
	// with the shipped RBAC, as in a cluster.
	schedKubeconfig, err := c.serviceAccountKubeconfig(ctx, "gleaner-scheduler", t.day)
	if err != nil {
		return err
	}
	ctrlKubeconfig, err := c.serviceAccountKubeconfig(ctx, "gleaner-controller", t.day)
	if err != nil {
		return err
	}
	sched, err := componentArgs(objs, "gleaner-scheduler", c.dir, schedKubeconfig)
	if err != nil {
		return err
	}
	if c.procs["gleaner-scheduler"], err = c.sup.start("gleaner-scheduler", filepath.Join(cfg.BinDir, "gleaner-scheduler"), sched.args...); err != nil {
		return err
	}
	ctrl, err := componentArgs(objs, "gleaner-controller", c.dir, ctrlKubeconfig)
	if err != nil {
		return err
	}
	ctrlArgs := override(ctrl.args, t.controllerFlags())
	if c.procs["gleaner-controller"], err = c.sup.start("gleaner-controller", filepath.Join(cfg.BinDir, "gleaner-controller"), ctrlArgs...); err != nil {
		return err
	}
	if err := waitHTTP(ctx, c.procs["gleaner-scheduler"], sched.health, "", 60*time.Second); err != nil {
		return err
	}
	return waitHTTP(ctx, c.procs["gleaner-controller"], ctrl.health, "", 60*time.Second)
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// ServiceAccount gleaner-system/sa that outlives the demo.
func (c *cluster) serviceAccountKubeconfig(ctx context.Context, sa string, day time.Duration) (string, error) {
	expiry := int64((day + time.Hour).Seconds())
	tr, err := c.client.CoreV1().ServiceAccounts(api.SystemNamespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for ServiceAccount %s/%s (from manifests/): %w", api.SystemNamespace, sa, err)
	}
	cfg := rest.CopyConfig(c.config)
	cfg.BearerToken = tr.Status.Token
	path := filepath.Join(c.dir, sa+".kubeconfig")
	return path, writeKubeconfig(cfg, path)
}

type component struct {
	args   []string
	health string
}

// componentArgs turns a rendered Deployment's container args into a local
// process's: the mounted scheduler configuration is written to disk and points
// at kubeconfig, ports become free ones.
func componentArgs(objs []*unstructured.Unstructured, name, dir, kubeconfig string) (component, error) {
	var d *appsv1.Deployment
	for _, obj := range objs {
		if obj.GetKind() == "Deployment" && obj.GetName() == name {
			d = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, d); err != nil {
				return component{}, err
			}
		}
	}
	if d == nil {
		return component{}, fmt.Errorf("the rendered manifests have no Deployment %s", name)
	}
	port, err := freePort("127.0.0.1")
	if err != nil {
		return component{}, err
	}
	scheme := "http"
	var out component
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		flag, value, _ := strings.Cut(a, "=")
		switch flag {
		case "--config":
			file, err := writeSchedulerConfig(objs, value, kubeconfig, dir)
			if err != nil {
				return component{}, err
			}
			value = file
		case "--secure-port":
			scheme = "https"
			value = fmt.Sprint(port)
		case "--cert-dir":
			value = filepath.Join(dir, name+"-certs")
		}
		out.args = append(out.args, flag+"="+value)
	}
	if name == "gleaner-controller" {
		out.args = append(out.args, "--kubeconfig="+kubeconfig)
	}
	out.health = fmt.Sprintf("%s://127.0.0.1:%d/healthz", scheme, port)
	return out, nil
}

// writeSchedulerConfig writes the rendered ConfigMap's config file with its
// clientConnection pointing at kubeconfig.
func writeSchedulerConfig(objs []*unstructured.Unstructured, mounted, kubeconfig, dir string) (string, error) {
	key := filepath.Base(mounted)
	for _, obj := range objs {
		if obj.GetKind() != "ConfigMap" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
		raw, ok := data[key]
		if !ok || !strings.Contains(raw, "KubeSchedulerConfiguration") {
			continue
		}
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(raw), &doc); err != nil {
			return "", err
		}
		doc["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
		out, err := yaml.Marshal(doc)
		if err != nil {
			return "", err
		}
		file := filepath.Join(dir, "gleaner-scheduler-config.yaml")
		return file, os.WriteFile(file, out, 0o600)
	}
	return "", fmt.Errorf("no rendered ConfigMap holds the scheduler configuration %s", key)
}

// override replaces flags of args by those in set (same name) and appends the rest.
func override(args, set []string) []string {
	byName := map[string]string{}
	var order []string
	for _, s := range set {
		name, _, _ := strings.Cut(s, "=")
		byName[name] = s
		order = append(order, name)
	}
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if s, ok := byName[name]; ok {
			out = append(out, s)
			delete(byName, name)
			continue
		}
		out = append(out, a)
	}
	for _, name := range order {
		if s, ok := byName[name]; ok {
			out = append(out, s)
		}
	}
	return out
}

// waitHTTP polls url until it answers 200, the process exits or timeout passes.
func waitHTTP(ctx context.Context, p *proc, url, token string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // self-signed serving certificates of a local cluster
	}}
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			return fmt.Errorf("%s exited while starting; its log %s ends:\n%s", p.name, p.log, p.tail(15))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become healthy at %s within %v; see %s:\n%s", p.name, url, timeout, p.log, p.tail(15))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["gleaner-demo"] = &clientcmdapi.Cluster{Server: cfg.Host, InsecureSkipTLSVerify: true}
	kc.AuthInfos["demo-admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["gleaner-demo"] = &clientcmdapi.Context{Cluster: "gleaner-demo", AuthInfo: "demo-admin"}
	kc.CurrentContext = "gleaner-demo"
	return clientcmd.WriteToFile(*kc, path)
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
