package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

func numCPU() int { return runtime.NumCPU() }

// Namespaces of the benchmark's pods.
const (
	inferenceNS  = "llm"
	bestEffortNS = "research"
)

// Shape of each GPU node: an inference replica of inferenceGPUs, up to
// lentPerNode best-effort pods of one GPU each, and the rest free.
const (
	nodeGPUs      = 8
	inferenceGPUs = 2
	lentPerNode   = 4
)

// cluster is etcd and kube-apiserver, each a process, and an admin client.
type cluster struct {
	dir        string
	etcd, api  *proc
	host       string
	token      string
	kubeconfig string
	config     *rest.Config
	client     kubernetes.Interface
}

// startCluster starts etcd and kube-apiserver, as the demo does, and waits for /readyz.
func startCluster(ctx context.Context, dir, tools string) (*cluster, error) {
	c := &cluster{dir: dir}
	etcdClient, err1 := freePort()
	etcdPeer, err2 := freePort()
	apiPort, err3 := freePort()
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, fmt.Errorf("finding free ports: %v %v %v", err1, err2, err3)
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	local := filepath.Join(tools, "localcluster")
	var err error
	if c.etcd, err = start(dir, "etcd", local, "etcd",
		"--name=bench", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=bench="+peerURL,
		"--unsafe-no-fsync", // a throw-away cluster: spare the shared disk
		"--quota-backend-bytes=8589934592",
		"--log-level=warn"); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, c.etcd, etcdURL+"/health", "", 30*time.Second); err != nil {
		return nil, err
	}
	c.token = randomHex(16)
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, err
	}
	tokens := filepath.Join(pki, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.token+`,bench-admin,bench-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, err
	}
	saKey := filepath.Join(pki, "service-account.key")
	if err := writeRSAKey(saKey); err != nil {
		return nil, err
	}
	if c.api, err = start(dir, "kube-apiserver", local, "kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir="+pki,
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saKey, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
		// No service-account or node-lifecycle controller runs: these would block pods.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--profiling=false"); err != nil {
		return nil, err
	}
	c.host = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	if err := waitHTTP(ctx, c.api, c.host+"/readyz", c.token, 120*time.Second); err != nil {
		return nil, err
	}
	// The set-up's own client: fast, so that creating the fleet takes
	// minutes rather than the controller's pace.
	c.config = &rest.Config{Host: c.host, BearerToken: c.token, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS: 5000, Burst: 5000}
	if c.client, err = kubernetes.NewForConfig(c.config); err != nil {
		return nil, err
	}
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: c.host, InsecureSkipTLSVerify: true}
	kc.AuthInfos["bench-admin"] = &clientcmdapi.AuthInfo{Token: c.token}
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench-admin"}
	kc.CurrentContext = "bench"
	return c, clientcmd.WriteToFile(*kc, c.kubeconfig)
}

func (c *cluster) stop() {
	if c == nil {
		return
	}
	c.api.stop(10 * time.Second)
	c.etcd.stop(10 * time.Second)
}

// fleet is the objects the benchmark creates.
type fleet struct {
	nodes, services, bestEffort int
	simPort                     int
	// podIP of inference pod i (on node i): a loopback address vllm-sim answers on.
	podIPs []string
}

func newFleet(nodes, services, bestEffort, simPort int) *fleet {
	f := &fleet{nodes: nodes, services: services, bestEffort: bestEffort, simPort: simPort}
	for i := range nodes {
		f.podIPs = append(f.podIPs, fmt.Sprintf("127.43.%d.%d", i/250, i%250+1))
	}
	return f
}

func nodeName(i int) string          { return fmt.Sprintf("gpu-%05d", i) }
func serviceName(i int) string       { return fmt.Sprintf("svc-%04d", i) }
func (f *fleet) serviceOf(i int) int { return i % f.services }

// parallel runs do(i) for i in [0, n) on workers goroutines; the first error stops it.
func parallel(ctx context.Context, n, workers int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := do(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// create makes the namespaces, PriorityClasses, nodes (Ready, with GPUs) and
// pods: one inference pod per node, bound and Running with a loopback IP, and
// the best-effort pods beyond lentPerNode per node, pending.
func (f *fleet) create(ctx context.Context, client kubernetes.Interface) error {
	for _, ns := range []*v1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: inferenceNS, Labels: map[string]string{api.LabelInferenceNamespace: "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: bestEffortNS}},
		{ObjectMeta: metav1.ObjectMeta{Name: api.SystemNamespace}},
	} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	never := v1.PreemptNever
	for _, pc := range []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "gleaner-inference"}, Value: 1000000},
		{ObjectMeta: metav1.ObjectMeta{Name: "gleaner-best-effort"}, Value: -1000, PreemptionPolicy: &never},
	} {
		if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	const workers = 32
	if err := parallel(ctx, f.nodes, workers, func(ctx context.Context, i int) error {
		gpus := resource.MustParse(fmt.Sprint(nodeGPUs))
		capacity := v1.ResourceList{api.GPUResource: gpus, v1.ResourceCPU: resource.MustParse("96"),
			v1.ResourceMemory: resource.MustParse("1Ti"), v1.ResourcePods: resource.MustParse("110")}
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{api.LabelPool: api.PoolInference}}}
		n, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		n.Status = v1.NodeStatus{Capacity: capacity, Allocatable: capacity,
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("creating nodes: %w", err)
	}
	if err := parallel(ctx, f.nodes, workers, func(ctx context.Context, i int) error {
		svc := serviceName(f.serviceOf(i))
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", svc, i), Namespace: inferenceNS,
				Labels:      map[string]string{api.LabelRole: api.RoleInference, api.LabelService: svc},
				Annotations: map[string]string{api.AnnotationMetricsPort: fmt.Sprint(f.simPort)}},
			Spec: v1.PodSpec{NodeName: nodeName(i), PriorityClassName: "gleaner-inference",
				Containers: []v1.Container{{Name: "vllm", Image: "vllm/vllm-openai",
					Resources: v1.ResourceRequirements{Requests: v1.ResourceList{api.GPUResource: resource.MustParse(fmt.Sprint(inferenceGPUs))},
						Limits: v1.ResourceList{api.GPUResource: resource.MustParse(fmt.Sprint(inferenceGPUs))}}}}},
		}
		dress(p)
		return createRunning(ctx, client, p, f.podIPs[i])
	}); err != nil {
		return fmt.Errorf("creating inference pods: %w", err)
	}
	return f.createBestEffort(ctx, client, false)
}

// createBestEffort creates the pending best-effort pods, or with bound, those
// lentPerNode per node, bound and Running (as if gleaner-scheduler had placed them).
func (f *fleet) createBestEffort(ctx context.Context, client kubernetes.Interface, bound bool) error {
	const workers = 32
	first, n := f.nodes*lentPerNode, f.bestEffort-f.nodes*lentPerNode
	if bound {
		first, n = 0, min(f.bestEffort, f.nodes*lentPerNode)
	}
	grace := int64(120) // the controller's default cap: evicted pods stay terminating past a scenario
	if err := parallel(ctx, max(n, 0), workers, func(ctx context.Context, i int) error {
		i += first
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("train-%05d", i), Namespace: bestEffortNS,
				Labels: map[string]string{"app": "train"}},
			Spec: v1.PodSpec{SchedulerName: "gleaner-scheduler", PriorityClassName: "gleaner-best-effort",
				TerminationGracePeriodSeconds: &grace,
				Containers: []v1.Container{{Name: "train", Image: "trainer",
					Resources: v1.ResourceRequirements{Requests: v1.ResourceList{api.GPUResource: resource.MustParse("1")},
						Limits: v1.ResourceList{api.GPUResource: resource.MustParse("1")}}}}},
		}
		dress(p)
		if i >= f.nodes*lentPerNode {
			_, err := client.CoreV1().Pods(bestEffortNS).Create(ctx, p, metav1.CreateOptions{})
			return err // pending: waiting for GPUs to be lent
		}
		p.Spec.NodeName = nodeName(i / lentPerNode)
		return createRunning(ctx, client, p, "")
	}); err != nil {
		return fmt.Errorf("creating best-effort pods: %w", err)
	}
	return nil
}

// dress gives a pod what a real one carries and Gleaner does not read (an
// environment, a command, probes, mounts and volumes, and the last-applied
// annotation kubectl apply leaves, a copy of the spec), about 3 KiB, so that
// the controller's memory is measured on pods of a real cluster's size.
func dress(p *v1.Pod) {
	c := &p.Spec.Containers[0]
	for _, kv := range [][2]string{
		{"HF_HOME", "/models/cache"}, {"NCCL_DEBUG", "WARN"}, {"NCCL_SOCKET_IFNAME", "eth0"}, {"PYTHONUNBUFFERED", "1"},
		{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}, {"OMP_NUM_THREADS", "8"},
		{"WANDB_PROJECT", "research-" + p.Name}, {"CHECKPOINT_DIR", "/checkpoints/" + p.Namespace + "/" + p.Name},
		{"MODEL", "meta-llama/Llama-3.1-8B-Instruct"}, {"MAX_MODEL_LEN", "8192"}, {"GPU_MEMORY_UTILIZATION", "0.92"},
	} {
		c.Env = append(c.Env, v1.EnvVar{Name: kv[0], Value: kv[1]})
	}
	c.Env = append(c.Env, v1.EnvVar{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	c.Command = []string{"python3", "-m", "entrypoint"}
	c.Args = []string{"--config=/etc/job/config.yaml", "--log-level=info", "--checkpoint-every=10m"}
	probe := &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8000)}},
		PeriodSeconds: 10, FailureThreshold: 3}
	c.ReadinessProbe, c.LivenessProbe = probe, probe.DeepCopy()
	c.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8000}}
	for _, v := range []v1.Volume{
		{Name: "shm", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "job-config"}}}},
		{Name: "models", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "models", ReadOnly: true}}},
	} {
		p.Spec.Volumes = append(p.Spec.Volumes, v)
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	applied, _ := json.Marshal(p)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = string(applied)
}

// createRunning creates a bound pod and writes its status as a kubelet would:
// Running and Ready, with ip when given.
func createRunning(ctx context.Context, client kubernetes.Interface, p *v1.Pod, ip string) error {
	p, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	var statuses []v1.ContainerStatus
	for _, c := range p.Spec.Containers {
		statuses = append(statuses, v1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "sha256:" + strings.Repeat("0", 64),
			ContainerID: "containerd://" + strings.Repeat("0", 64), Ready: true, Started: &[]bool{true}[0],
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}})
	}
	p.Status = v1.PodStatus{Phase: v1.PodRunning, StartTime: &now, PodIP: ip, HostIP: "127.0.0.1", ContainerStatuses: statuses,
		Conditions: []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: now},
			{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: now},
			{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: now},
			{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: now},
		}}
	if ip != "" {
		p.Status.PodIPs = []v1.PodIP{{IP: ip}}
	}
	_, err = client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}
