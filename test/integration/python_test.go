package integration

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/restmapper"
	jobcontroller "k8s.io/kubernetes/pkg/controller/job"

	"github.com/gleaner-dev/gleaner/internal/torchtest"
	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/reclaim"
)

// TestPythonTrainerKeepsTheContract runs examples/python/train.py, with real
// PyTorch, as the container of the Job that kubectl gleaner submit makes,
// against the real API server: set up as docs/researchers.md says (the
// namespace's ServiceAccount and Role from examples/argo/rbac.yaml, a
// PersistentVolumeClaim for the checkpoints), given a reclaim notice that
// moves, evicted through the Eviction API at the noticed time, and resumed
// in the pod its Job makes again. Every step runs exactly once across the two
// pods, the notice gets one checkpoint timed to it, and the trainer records
// its checkpoints on its pod with the pod's own token.
//
// No kubelet runs here: the test plays it (pythonKubelet), running the
// container's command as a local process with the pod's mounts mapped to
// directories, and binds the pods itself in place of gleaner-scheduler
// (TestResearcherWalkthrough covers placement and the controller's reclaim).
func TestPythonTrainerKeepsTheContract(t *testing.T) {
	python := torchtest.Python(t)
	cp := startControlPlane(t, "--authorization-mode=RBAC")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	createNamespace(t, cp.client, researchNS)
	(&harvestEnv{t: t, client: cp.client}).installPriorityClasses()
	createGPUNode(t, cp.client, "gpu-py", 1, map[string]string{api.LabelPool: api.PoolInference})
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.client.Discovery()))
	for _, obj := range readRepoObjects(t, "examples/argo/rbac.yaml") {
		obj.SetNamespace(researchNS)
		if err := applyStrict(ctx, cp, mapper, obj); err != nil {
			t.Fatalf("applying examples/argo/rbac.yaml's %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "trainer-ckpt"}, Spec: v1.PersistentVolumeClaimSpec{
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	if _, err := cp.client.CoreV1().PersistentVolumeClaims(researchNS).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cp.client, 0)
	jobs, err := jobcontroller.NewController(ctx, cp.client, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	go jobs.Run(ctx, 1)

	const steps = 400
	code, stdout, stderr := kubectlGleaner(t, cp, "submit", "trainer", "-n", researchNS, "--image", "registry.example.com/me/trainer:1",
		"--gpus", "1", "--grace", "20s", "--checkpoint-pvc", "trainer-ckpt", "--service-account", "gleaner-research-step", "--",
		"python3", "/app/train.py", "--steps", strconv.Itoa(steps), "--save-every", "50", "--step-seconds", "0.05",
		// The kubelet's mounts, named so that the stand-in can map them.
		"--notice-file", "/etc/podinfo/annotations", "--service-account-dir", "/var/run/secrets/kubernetes.io/serviceaccount")
	if code != 0 || !strings.Contains(stdout, "job.batch/trainer created") {
		t.Fatalf("submit: exit %d\n%s%s", code, stdout, stderr)
	}
	k := startPythonKubelet(t, ctx, cp, python, "trainer", "gleaner-research-step")

	// The first pod trains, checkpoints every 50 steps and records each on
	// its pod through the API, with its ServiceAccount's token.
	first := k.waitRun(t, 0)
	waitFor(t, "a periodic checkpoint recorded on the pod", 60*time.Second, func() bool {
		return strings.Contains(first.output(), "reason=periodic") && k.pod(t, first.pod).Annotations[api.AnnotationLastCheckpoint] != ""
	})
	// Beside it, how long its saves take, as a Go duration the reclaimer
	// reads: a save of this small model takes well under its grace period.
	if took, ok := api.SaveDuration(k.pod(t, first.pod)); !ok || took <= 0 || took >= 20*time.Second {
		t.Errorf("the pod declares its saves take %q (%v, %v): want a readable duration above 0 and under its 20 s grace",
			k.pod(t, first.pod).Annotations[api.AnnotationSaveDuration], took, ok)
	}

	// A reclaim notice, as gleaner-controller gives it; the forecast then
	// moves it before its checkpoint is due. The trainer saves once, timed
	// to the moved notice, and trains on.
	noticed := time.Now().Add(6 * time.Second).Truncate(time.Second)
	k.notice(t, first.pod, noticed)
	waitFor(t, "the trainer to see the notice", 15*time.Second, func() bool {
		return strings.Contains(first.output(), "reclaim notice: checkpointing")
	})
	moved := noticed.Add(3 * time.Second)
	k.notice(t, first.pod, moved)
	waitFor(t, "the notice's checkpoint", 20*time.Second, func() bool { return strings.Contains(first.output(), "reason=notice") })
	savedAt := loggedTime(t, first.output(), "reason=notice")
	if savedAt.Before(moved.Add(-2500*time.Millisecond)) || savedAt.After(moved) {
		t.Errorf("the notice's checkpoint was saved at %v: want it timed to the moved notice, %v, and before it", savedAt.Format(time.StampMilli), moved.Format(time.StampMilli))
	}
	waitFor(t, "the notice's checkpoint recorded on the pod", 10*time.Second, func() bool {
		at, err := time.Parse(time.RFC3339, k.pod(t, first.pod).Annotations[api.AnnotationLastCheckpoint])
		return err == nil && !at.Before(savedAt.Truncate(time.Second))
	})

	// Evicted at the noticed time, as the reclaimer evicts a pod that has not
	// saved for its notice: with the grace period its declared save and 10 s
	// to exit make, shorter than submit's 20 s. The kubelet sends SIGTERM;
	// the trainer saves and exits 143 within it.
	time.Sleep(time.Until(moved))
	given := reclaim.Candidate{Pod: k.pod(t, first.pod)}.EvictionGrace(reclaim.DefaultMaxGrace)
	if given >= 20*time.Second {
		t.Fatalf("the reclaimer would give %s %v, its whole grace period: its declared save (%q) is not read",
			first.pod, given, k.pod(t, first.pod).Annotations[api.AnnotationSaveDuration])
	}
	grace := int64(given / time.Second)
	if err := cp.client.PolicyV1().Evictions(researchNS).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: first.pod, Namespace: researchNS},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace}}); err != nil {
		t.Fatalf("evicting %s: %v", first.pod, err)
	}
	if code := first.wait(t, 30*time.Second); code != 143 {
		t.Fatalf("the evicted trainer exited %d, want 143:\n%s", code, first.tail())
	}
	if got := k.graceOf(first); got != grace {
		t.Errorf("%s was deleted with a grace period of %d s, want the %d s its declared save makes", first.pod, got, grace)
	}

	// Its Job makes the pod again (an eviction is no failure), and the
	// trainer resumes from the checkpoint on the claim and finishes.
	second := k.waitRun(t, 1)
	if code := second.wait(t, 120*time.Second); code != 0 {
		t.Fatalf("the resumed trainer exited %d:\n%s", code, second.tail())
	}
	eventually(t, 30*time.Second, "the Job to complete", func(ctx context.Context) (bool, error) {
		job, err := cp.client.BatchV1().Jobs(researchNS).Get(ctx, "trainer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(job.Status.Conditions, func(c batchv1.JobCondition) bool {
			return c.Type == batchv1.JobComplete && c.Status == v1.ConditionTrue
		}), nil
	})

	// Nothing lost, nothing repeated.
	ran := append(stepsRun(first.output()), stepsRun(second.output())...)
	counts := map[int]int{}
	for _, s := range ran {
		counts[s]++
	}
	for s := 0; s < steps; s++ {
		if counts[s] != 1 {
			t.Errorf("step %d ran %d times across the two pods", s, counts[s])
		}
	}
	if len(ran) != steps {
		t.Errorf("%d steps ran across the two pods, want %d", len(ran), steps)
	}
	stopped := loggedStep(t, first.output(), "reason=sigterm")
	if resumed := loggedStep(t, second.output(), "resumed from checkpoint"); resumed != stopped {
		t.Errorf("resumed at step %d, the evicted pod saved %d", resumed, stopped)
	}
	if n := strings.Count(first.output(), "reason=notice"); n != 1 {
		t.Errorf("%d checkpoints for the notice, want 1 (timed, not one per change)", n)
	}
	for _, r := range []*podRun{first, second} {
		if strings.Contains(r.output(), "could not record") || strings.Contains(r.output(), "not recording") {
			t.Errorf("%s did not record its checkpoints on its pod:\n%s", r.pod, r.tail())
		}
	}
	t.Logf("notice moved to %s, its checkpoint %v before it; evicted at step %d; resumed there and finished",
		moved.Format(time.TimeOnly), moved.Sub(savedAt).Round(10*time.Millisecond), stopped)
}

var stepLine = regexp.MustCompile(`(?m)^step=(\d+) loss=`)

// stepsRun are the steps a trainer's output says it ran.
func stepsRun(output string) []int {
	var out []int
	for _, m := range stepLine.FindAllStringSubmatch(output, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// loggedField reads field=VALUE from the first line of output containing marker.
func loggedField(t *testing.T, output, marker, field string) string {
	t.Helper()
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, marker) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				return v
			}
		}
	}
	t.Fatalf("no %q line with %s= in:\n%s", marker, field, output)
	return ""
}

func loggedStep(t *testing.T, output, marker string) int {
	t.Helper()
	n, err := strconv.Atoi(loggedField(t, output, marker, "step"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func loggedTime(t *testing.T, output, marker string) time.Time {
	t.Helper()
	f, err := strconv.ParseFloat(loggedField(t, output, marker, "time"), 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, int64(f*1e9))
}

// pythonKubelet plays the kubelet, and the scheduler's binding, for one
// Job's pods: it binds each new pod to gpu-py, runs its container's command
// as a local process (python3 is the Python with PyTorch; /app is
// examples/python; the claim, the downward API annotations and the
// ServiceAccount token are directories), keeps the annotations file current,
// sends SIGTERM when the pod is deleted, and ends the pod as its process
// ended, as a kubelet reports it.
type pythonKubelet struct {
	cp      *controlPlane
	python  string
	job     string
	mounts  map[string]string // container path -> directory, but the per-pod podinfo
	mu      sync.Mutex
	runs    []*podRun
	byUID   map[types.UID]*podRun
	cluster string // KUBERNETES_SERVICE_HOST
	port    string
}

// podRun is one pod's container, run as a process.
type podRun struct {
	*process
	pod      string
	uid      types.UID
	podinfo  string
	termSent bool
	grace    int64
	ended    bool
}

func startPythonKubelet(t *testing.T, ctx context.Context, cp *controlPlane, python, job, serviceAccount string) *pythonKubelet {
	t.Helper()
	u, err := url.Parse(cp.config.Host)
	if err != nil {
		t.Fatal(err)
	}
	k := &pythonKubelet{cp: cp, python: python, job: job, byUID: map[types.UID]*podRun{}, cluster: u.Hostname(), port: u.Port(),
		mounts: map[string]string{"/app": filepath.Join(repoRoot(t), "examples", "python"), "/ckpt": t.TempDir()}}
	// The projected ServiceAccount token volume.
	sa := t.TempDir()
	tr, err := cp.client.CoreV1().ServiceAccounts(researchNS).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for %s: %v", serviceAccount, err)
	}
	ca := servingCA(t, u.Host)
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte(researchNS)} {
		if err := os.WriteFile(filepath.Join(sa, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k.mounts["/var/run/secrets/kubernetes.io/serviceaccount"] = sa
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done }) // before the test's end: sync logs to t
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			k.sync(t, ctx)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return k
}

// servingCA returns, PEM-encoded, the CA of the certificate the API server
// serves at host, as a pod's ca.crt holds it. The test's client config
// trusts another certificate (the loopback one, by its server name), so it
// is read from the handshake.
func servingCA(t *testing.T, host string) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true}) // only to read the chain
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	chain := conn.ConnectionState().PeerCertificates
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: chain[len(chain)-1].Raw})
}

// graceOf is the grace period the run's pod was deleted with (0: not deleted).
func (k *pythonKubelet) graceOf(run *podRun) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return run.grace
}

func (k *pythonKubelet) sync(t *testing.T, ctx context.Context) {
	pods, err := k.cp.client.CoreV1().Pods(researchNS).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + k.job})
	if err != nil {
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		k.mu.Lock()
		run := k.byUID[pod.UID]
		k.mu.Unlock()
		switch {
		case run == nil && pod.DeletionTimestamp == nil && pod.Status.Phase == v1.PodPending:
			k.start(t, ctx, pod)
		case run == nil:
		case run.exited():
			k.end(ctx, pod, run)
		default:
			writeDownwardAnnotations(t, filepath.Join(run.podinfo, "annotations"), pod.Annotations)
			if pod.DeletionTimestamp != nil && !run.termSent {
				k.mu.Lock()
				run.termSent, run.grace = true, *pod.DeletionGracePeriodSeconds
				k.mu.Unlock()
				_ = run.cmd.Process.Signal(syscall.SIGTERM)
				go func(p *process, grace time.Duration) { // past the grace period: SIGKILL
					select {
					case <-p.done:
					case <-time.After(grace):
						_ = p.cmd.Process.Kill()
					}
				}(run.process, time.Duration(run.grace)*time.Second)
			}
		}
	}
}

// start binds the pod, reports it running and runs its container.
func (k *pythonKubelet) start(t *testing.T, ctx context.Context, pod *v1.Pod) {
	if pod.Spec.NodeName == "" {
		binding := &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID}, Target: v1.ObjectReference{Kind: "Node", Name: "gpu-py"}}
		if err := k.cp.client.CoreV1().Pods(researchNS).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Logf("binding %s: %v (will retry)", pod.Name, err)
			return
		}
	}
	podinfo := t.TempDir()
	writeDownwardAnnotations(t, filepath.Join(podinfo, "annotations"), pod.Annotations)
	c := pod.Spec.Containers[0]
	mounts := map[string]string{"/etc/podinfo": podinfo}
	for path, dir := range k.mounts {
		mounts[path] = dir
	}
	for _, m := range c.VolumeMounts { // submit's claim, mounted where it says
		if m.Name == "checkpoints" {
			mounts[m.MountPath] = k.mounts["/ckpt"]
		}
	}
	mapPath := func(s string) string {
		for path, dir := range mounts {
			if s == path || strings.HasPrefix(s, path+"/") {
				return dir + strings.TrimPrefix(s, path)
			}
		}
		return s
	}
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(argv) == 0 || argv[0] != "python3" {
		t.Errorf("the container's command is %q, want python3 ...", argv)
		return
	}
	argv[0] = k.python
	for i := range argv[1:] {
		argv[i+1] = mapPath(argv[i+1])
	}
	env := []string{"KUBERNETES_SERVICE_HOST=" + k.cluster, "KUBERNETES_SERVICE_PORT=" + k.port, "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+pod.Name)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+pod.Namespace)
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+mapPath(e.Value))
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	run := &podRun{pod: pod.Name, uid: pod.UID, podinfo: podinfo, process: startCommand(t, pod.Name, cmd)}
	k.mu.Lock()
	k.byUID[pod.UID] = run
	k.runs = append(k.runs, run)
	k.mu.Unlock()

	cur, err := k.cp.client.CoreV1().Pods(researchNS).Get(ctx, pod.Name, metav1.GetOptions{})
	if err == nil {
		now := metav1.Now()
		cur.Status.Phase, cur.Status.StartTime = v1.PodRunning, &now
		cur.Status.Conditions = append(cur.Status.Conditions, v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: now})
		cur.Status.ContainerStatuses = []v1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true, Started: new(true),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}}}
		_, err = k.cp.client.CoreV1().Pods(researchNS).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Errorf("reporting %s running: %v", pod.Name, err)
	}
}

// end reports the pod ended as its process did, and removes it if it was
// being deleted.
func (k *pythonKubelet) end(ctx context.Context, pod *v1.Pod, run *podRun) {
	if run.ended {
		return
	}
	code := int32(exitCode(run.process))
	pod = pod.DeepCopy()
	pod.Status.Phase = v1.PodSucceeded
	if code != 0 {
		pod.Status.Phase = v1.PodFailed
	}
	now := metav1.Now()
	c := pod.Spec.Containers[0]
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: c.Name, Image: c.Image,
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code, FinishedAt: now, Reason: map[bool]string{true: "Completed", false: "Error"}[code == 0]}}}}
	if _, err := k.cp.client.CoreV1().Pods(researchNS).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return // retried on the next sync
	}
	if pod.DeletionTimestamp != nil {
		zero := int64(0)
		if err := k.cp.client.CoreV1().Pods(researchNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}}); err != nil {
			return
		}
	}
	run.ended = true
}

// exitCode is the process's exit status as a container runtime reports it:
// 128 plus the signal that killed it.
func exitCode(p *process) int {
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitRun waits for the i-th pod (from 0) to be running its container.
func (k *pythonKubelet) waitRun(t *testing.T, i int) *podRun {
	t.Helper()
	var run *podRun
	waitFor(t, fmt.Sprintf("pod %d of Job %s to run", i+1, k.job), 60*time.Second, func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		if len(k.runs) > i {
			run = k.runs[i]
		}
		return run != nil
	})
	return run
}

func (k *pythonKubelet) pod(t *testing.T, name string) *v1.Pod {
	t.Helper()
	p, err := k.cp.client.CoreV1().Pods(researchNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// notice sets the pod's reclaim notice, as gleaner-controller does.
func (k *pythonKubelet) notice(t *testing.T, pod string, at time.Time) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.AnnotationReclaimNotice, at.UTC().Format(time.RFC3339))
	if _, err := k.cp.client.CoreV1().Pods(researchNS).Patch(context.Background(), pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
