package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/vllm"
)

// informerStatus is what the informer process answers to "status".
type informerStatus struct {
	Scrapes    float64 `json:"scrapes"` // attempted: gleaner_vllm_scrape_duration_seconds count
	Seconds    float64 `json:"seconds"` // their total duration: its sum
	Failures   float64 `json:"failures"`
	Fresh      int     `json:"fresh"`
	Endpoints  int     `json:"endpoints"`
	HeapInuse  uint64  `json:"heapInuse"`
	Goroutines int     `json:"goroutines"`
}

const benchNamespace = "serving"

// address is the loopback address of endpoint n: 127.77.0.1, ..., 127.77.0.250, 127.77.1.1, ...
func address(n int) string { return fmt.Sprintf("127.77.%d.%d", n/250, n%250+1) }

// runInformer is the informer's own process: a vllm.Informer, as
// gleaner-controller runs it, over endpoints pods of a fake clientset whose IPs
// are the simulator's loopback addresses, with a Snapshot each interval as the
// controller's round takes. It reads commands on stdin, one a line, and
// answers each on stdout: "status" (a JSON informerStatus), "profile PATH"
// and "profile-stop" (a CPU profile). It exits when stdin closes.
func runInformer(endpoints, port int, interval time.Duration) error {
	// The simple clientset: the field-managing one spends seconds per thousand
	// pods building REST mappers, and the informer strips managed fields anyway.
	client := fake.NewSimpleClientset() //nolint:staticcheck // see above
	for n := range endpoints {
		if err := client.Tracker().Add(benchPod(n, port)); err != nil {
			return err
		}
	}
	inf := vllm.NewInformer(client, vllm.Options{Namespaces: []string{benchNamespace}, Interval: interval})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	for deadline := time.Now().Add(time.Minute); !inf.HasSynced(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the pod informer did not sync within a minute")
		}
	}
	go func() {
		for range time.Tick(interval) {
			inf.Snapshot()
		}
	}()

	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	var profile *os.File
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		cmd, arg, _ := strings.Cut(lines.Text(), " ")
		switch cmd {
		case "status":
			b, err := json.Marshal(status(inf))
			if err != nil {
				return err
			}
			out.Write(b)
		case "profile":
			f, err := os.Create(arg)
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			profile = f
			out.WriteString("ok")
		case "profile-stop":
			if profile != nil {
				pprof.StopCPUProfile()
				profile.Close()
				profile = nil
			}
			out.WriteString("ok")
		default:
			return fmt.Errorf("unknown command %q", lines.Text())
		}
		out.WriteByte('\n')
		out.Flush()
	}
	return lines.Err()
}

func benchPod(n, port int) *corev1.Pod {
	gpus := resource.MustParse("4")
	name := fmt.Sprintf("vllm-%05d", n)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: benchNamespace, Name: name, UID: types.UID("uid-" + name),
			Labels:            map[string]string{api.LabelRole: api.RoleInference, api.LabelService: fmt.Sprintf("svc-%04d", n/2)},
			Annotations:       map[string]string{api.AnnotationMetricsPort: strconv.Itoa(port)},
			CreationTimestamp: metav1.Now(),
		},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("gpu-node-%05d", n/2),
			Containers: []corev1.Container{{
				Name: "vllm",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{api.GPUResource: gpus},
					Limits:   corev1.ResourceList{api.GPUResource: gpus},
				},
			}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      address(n),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

// status reads the informer's own metrics, as gleaner-controller serves them.
func status(inf *vllm.Informer) informerStatus {
	var s informerStatus
	families, _ := legacyregistry.DefaultGatherer.Gather()
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "gleaner_vllm_scrape_duration_seconds":
				s.Scrapes += float64(m.GetHistogram().GetSampleCount())
				s.Seconds += m.GetHistogram().GetSampleSum()
			case "gleaner_vllm_scrape_errors_total":
				s.Failures += m.GetCounter().GetValue()
			}
		}
	}
	for _, p := range inf.Snapshot() {
		s.Endpoints++
		if p.Fresh {
			s.Fresh++
		}
	}
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	s.HeapInuse = mem.HeapInuse
	s.Goroutines = runtime.NumGoroutine()
	return s
}

// informerProc is the parent's handle on the informer process.
type informerProc struct {
	in  io.Writer
	out *bufio.Scanner
}

func (p *informerProc) ask(cmd string) (string, error) {
	if _, err := io.WriteString(p.in, cmd+"\n"); err != nil {
		return "", fmt.Errorf("informer process: %w", err)
	}
	if !p.out.Scan() {
		return "", fmt.Errorf("informer process exited (asked %q): %v", cmd, p.out.Err())
	}
	return p.out.Text(), nil
}

func (p *informerProc) status() (informerStatus, error) {
	var s informerStatus
	line, err := p.ask("status")
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal([]byte(line), &s)
}
