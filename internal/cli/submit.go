package cli

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/gleaner-dev/gleaner/pkg/api"
	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
)

// Resources submit creates beside Jobs.
var (
	podGroupResource = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}
	workflowResource = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "workflows"}
)

// podinfoDir is where a submitted job's pods find their own annotations
// (the downward API keeps the file current): the reclaim notice.
const podinfoDir = "/etc/podinfo"

// defaultCheckpointDir is where --checkpoint-pvc mounts its claim unless
// --checkpoint-dir says otherwise.
const defaultCheckpointDir = "/ckpt"

type submitOptions struct {
	*options
	output             string
	dryRun             string
	image              string
	gpus               int64
	gang               int32
	grace              time.Duration
	checkpointURI      string
	checkpointPVC      string
	checkpointDir      string
	checkpointDirSet   bool
	checkpointInterval time.Duration
	env                []string
	from               string
	params             []string
	serviceAccount     string
	gpuResource        string
}

func newSubmitCommand(o *options) *cobra.Command {
	s := &submitOptions{options: o}
	cmd := &cobra.Command{
		Use:   "submit NAME --image IMAGE [flags] [-- COMMAND [ARGS...]] | submit --from workflowtemplate/NAME [-p NAME=VALUE...]",
		Short: "Run a best-effort job on harvested GPUs",
		Long: `submit runs a best-effort job on the GPUs Gleaner lends, set up as Gleaner
expects: gleaner-scheduler places it on lent GPUs only, the gleaner-best-effort
class makes it the one reclaimed, its grace period is its time to checkpoint,
an eviction does not count as a failure (the Job makes the pod again and it
resumes from its checkpoint), and its pods can read a reclaim notice from
` + podinfoDir + `/annotations.

Checkpoints must outlive the pod: --checkpoint-pvc mounts a
PersistentVolumeClaim at --checkpoint-dir (` + defaultCheckpointDir + `) and passes that
directory as CHECKPOINT_DIR; --checkpoint-uri passes an object-store location
the job writes to itself as CHECKPOINT_URI.

Before creating anything, submit has the API server check (a dry run) that
the cluster admits the job's pods: a grace period above the cluster's cap, a
PriorityClass or ServiceAccount that does not exist is refused here, not
later on every pod.

With --gang N, the job is N pods that run together or not at all (a PodGroup
and an Indexed Job of N completions). With --from workflowtemplate/NAME, it is
a run of an Argo WorkflowTemplate with -p parameters instead.`,
		Example: `  kubectl gleaner submit train-llama --image registry.example.com/me/train:1 --gpus 4 \
      --checkpoint-pvc llama-ckpt --checkpoint-interval 30m -- python3 train.py --steps 100000
  kubectl gleaner submit sft --image registry.example.com/me/sft:1 --gpus 4 \
      --checkpoint-uri s3://bucket/sft -- python3 sft.py
  kubectl gleaner submit pretrain --image registry.example.com/me/train:1 --gpus 8 --gang 4 -- torchrun train.py
  kubectl gleaner submit eval --image IMG --dry-run=client -o yaml
  kubectl gleaner submit --from workflowtemplate/gleaner-evaluation -p model=s3://m -p data=s3://d`,
		RunE: func(cmd *cobra.Command, args []string) error {
			s.checkpointDirSet = cmd.Flags().Changed("checkpoint-dir")
			return s.run(cmd.Context(), args, cmd.ArgsLenAtDash())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&s.output, "output", "o", "", "With --dry-run=client: print the objects as json or yaml instead of creating them.")
	f.StringVar(&s.dryRun, "dry-run", "none", `"client" prints what would be created (with -o), "server" has the API server check it without creating, "none" creates.`)
	f.StringVar(&s.image, "image", "", "Container image of the job's pods.")
	f.Int64Var(&s.gpus, "gpus", 1, "GPUs each pod asks for.")
	f.Int32Var(&s.gang, "gang", 0, "Run N pods together or not at all (a PodGroup of N); 0 for one pod.")
	f.DurationVar(&s.grace, "grace", 120*time.Second, "Time the job gets to checkpoint after SIGTERM, at most the cluster's reclaim grace cap (120s unless the admin changed it): submit refuses more.")
	f.StringVar(&s.checkpointURI, "checkpoint-uri", "", "Object-store location (e.g. s3://bucket/run) the job keeps its checkpoints in itself; passed as CHECKPOINT_URI.")
	f.StringVar(&s.checkpointPVC, "checkpoint-pvc", "", "PersistentVolumeClaim to keep checkpoints on: mounted at --checkpoint-dir, which is passed as CHECKPOINT_DIR.")
	f.StringVar(&s.checkpointDir, "checkpoint-dir", defaultCheckpointDir, "Where --checkpoint-pvc is mounted in the job's containers.")
	f.DurationVar(&s.checkpointInterval, "checkpoint-interval", 0, "How long the job runs between checkpoints: Gleaner places it where GPUs are likely to stay that long.")
	f.StringArrayVarP(&s.env, "env", "e", nil, "Environment variable NAME=VALUE of the job's pods (repeatable).")
	f.StringVar(&s.from, "from", "", "workflowtemplate/NAME: submit a run of this Argo WorkflowTemplate instead.")
	f.StringArrayVarP(&s.params, "parameter", "p", nil, "With --from: a workflow parameter NAME=VALUE (repeatable).")
	f.StringVar(&s.gpuResource, "gpu-resource", string(api.GPUResource), "Extended resource name of the cluster's GPUs.")
	f.StringVar(&s.serviceAccount, "service-account", "", "ServiceAccount of the job's pods (one allowed to patch its own pod, to record gleaner.dev/last-checkpoint).")
	return cmd
}

func (s *submitOptions) run(ctx context.Context, args []string, dash int) error {
	switch s.dryRun {
	case "none", "client", "server":
	default:
		return fmt.Errorf("--dry-run %q: want none, client or server", s.dryRun)
	}
	if s.output != "" && s.output != "json" && s.output != "yaml" {
		return fmt.Errorf("--output %q: want json or yaml", s.output)
	}
	c, err := s.clients()
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	if s.from != "" {
		objs, err = s.workflow(c.namespace, args)
	} else {
		objs, err = s.job(c.namespace, args, dash)
	}
	if err != nil {
		return err
	}
	if s.from == "" && s.checkpointPVC == "" && s.checkpointURI == "" {
		fmt.Fprintln(s.streams.ErrOut, "warning: no --checkpoint-pvc or --checkpoint-uri: unless the job keeps its checkpoints elsewhere, they are lost with each evicted pod")
	}
	if s.dryRun == "client" {
		list := map[string]any{"apiVersion": "v1", "kind": "List", "items": objs}
		if s.output == "" {
			for _, o := range objs {
				fmt.Fprintf(s.streams.Out, "%s/%s created (dry run)\n", kindRef(o), nameOf(o))
			}
			return nil
		}
		return printObject(s.streams.Out, s.output, list)
	}
	if s.from == "" {
		if err := s.preflight(ctx, c, objs[len(objs)-1]); err != nil {
			return err
		}
	}
	opts := metav1.CreateOptions{FieldManager: "kubectl-gleaner", FieldValidation: "Strict"}
	if s.dryRun == "server" {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var created []*unstructured.Unstructured
	for _, o := range objs {
		gvr := resourceOf(o)
		out, err := c.dynamic.Resource(gvr).Namespace(c.namespace).Create(ctx, o, opts)
		if err != nil {
			if v1alpha1.NotServed(err) && gvr == workflowResource {
				return fmt.Errorf("this cluster serves no Argo Workflows (workflows.argoproj.io): install Argo, or submit the job itself")
			}
			if v1alpha1.NotServed(err) && gvr == podGroupResource {
				return fmt.Errorf("this cluster serves no PodGroups (scheduling.x-k8s.io): Gleaner's CRDs are not installed (docs/install.md)")
			}
			return c.explain(err, "create", fmt.Sprintf("%s %s in namespace %s", o.GetKind(), nameOf(o), c.namespace), gvr)
		}
		created = append(created, out)
	}
	if s.output != "" {
		return printObject(s.streams.Out, s.output, map[string]any{"apiVersion": "v1", "kind": "List", "items": created})
	}
	suffix := ""
	if s.dryRun == "server" {
		suffix = " (server dry run)"
	}
	for _, o := range created {
		fmt.Fprintf(s.streams.Out, "%s/%s created%s\n", kindRef(o), o.GetName(), suffix)
	}
	last := created[len(created)-1]
	ref := last.GetKind() + "/" + last.GetName()
	if s.gang > 0 {
		ref = "PodGroup/" + last.GetName()
	}
	fmt.Fprintf(s.streams.Out, "Follow it: kubectl gleaner jobs -n %s --watch; kubectl gleaner describe %s -n %s\n", c.namespace, ref, c.namespace)
	return nil
}

// preflight checks, before anything is created, what would otherwise fail
// later on every pod the Job makes: that the checkpoint claim exists, and
// that the cluster admits a pod of the Job's template (a dry run through the
// API server's admission: Gleaner's policies, such as the grace cap, and the
// cluster's own). A user who may not create pods directly cannot ask the
// second; the Job is then created unchecked.
func (s *submitOptions) preflight(ctx context.Context, c *clients, job *unstructured.Unstructured) error {
	if s.checkpointPVC != "" {
		_, err := c.kube.CoreV1().PersistentVolumeClaims(c.namespace).Get(ctx, s.checkpointPVC, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("--checkpoint-pvc %s: no such PersistentVolumeClaim in namespace %s: create it first (docs/researchers.md shows one)", s.checkpointPVC, c.namespace)
		case err != nil && !apierrors.IsForbidden(err):
			return c.explain(err, "read", "PersistentVolumeClaim "+s.checkpointPVC, v1.SchemeGroupVersion.WithResource("persistentvolumeclaims"))
		}
	}
	review, err := c.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: c.namespace, Verb: "create", Resource: "pods",
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return c.explain(err, "ask", "whether you may create pods", authorizationv1.SchemeGroupVersion.WithResource("selfsubjectaccessreviews"))
	}
	if !review.Status.Allowed {
		fmt.Fprintln(s.streams.ErrOut, "note: you may not create pods yourself, so whether the cluster admits the job's pods is not checked before submitting")
		return nil
	}
	template, _, _ := unstructured.NestedMap(job.Object, "spec", "template")
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": template["spec"]}}
	if meta, ok := template["metadata"].(map[string]any); ok {
		pod.Object["metadata"] = meta
	}
	pod.SetGenerateName(job.GetName() + "-")
	pod.SetNamespace(c.namespace)
	_, err = c.dynamic.Resource(v1.SchemeGroupVersion.WithResource("pods")).Namespace(c.namespace).Create(ctx, pod,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "kubectl-gleaner"})
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		hint := ""
		if strings.Contains(errMessage(err), "terminationGracePeriodSeconds") {
			hint = " (--grace sets it)"
		}
		return fmt.Errorf("the cluster would refuse the job's pods, so nothing was created: %s%s", errMessage(err), hint)
	}
	return c.explain(err, "ask", "whether the cluster admits the job's pods", v1.SchemeGroupVersion.WithResource("pods"))
}

// kindRef names an object's kind as kubectl does: kind.group, in lower case.
func kindRef(o *unstructured.Unstructured) string {
	ref := strings.ToLower(o.GetKind())
	if g := o.GroupVersionKind().Group; g != "" {
		ref += "." + g
	}
	return ref
}

func nameOf(o *unstructured.Unstructured) string {
	if o.GetName() != "" {
		return o.GetName()
	}
	return o.GetGenerateName() + "<generated>"
}

func resourceOf(o *unstructured.Unstructured) schema.GroupVersionResource {
	switch o.GetKind() {
	case "PodGroup":
		return podGroupResource
	case "Workflow":
		return workflowResource
	}
	return batchv1.SchemeGroupVersion.WithResource("jobs")
}

// job builds the Job (and with --gang its PodGroup) from the flags.
func (s *submitOptions) job(ns string, args []string, dash int) ([]*unstructured.Unstructured, error) {
	if len(s.params) > 0 {
		return nil, fmt.Errorf("-p is for --from workflowtemplate/NAME")
	}
	names, command := args, []string(nil)
	if dash >= 0 {
		names, command = args[:dash], args[dash:]
	}
	if len(names) != 1 {
		return nil, fmt.Errorf("want one NAME before the command (submit NAME --image IMAGE -- COMMAND ...), got %d", len(names))
	}
	name := names[0]
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("NAME %q: %s", name, strings.Join(errs, "; "))
	}
	if s.image == "" {
		return nil, fmt.Errorf("--image is required: the container image that runs the job")
	}
	if s.gpus < 1 {
		return nil, fmt.Errorf("--gpus %d: a job on harvested GPUs asks for at least 1", s.gpus)
	}
	if s.gang < 0 || s.gang == 1 {
		return nil, fmt.Errorf("--gang %d: want 2 or more pods that run together, or 0 for one pod", s.gang)
	}
	if s.grace <= 0 || s.grace%time.Second != 0 {
		return nil, fmt.Errorf("--grace %v: want a positive whole number of seconds", s.grace)
	}
	if s.checkpointInterval < 0 || s.checkpointInterval > api.MaxCheckpointInterval {
		return nil, fmt.Errorf("--checkpoint-interval %v: want between 0 and %v", s.checkpointInterval, api.MaxCheckpointInterval)
	}
	if err := s.checkCheckpointFlags(); err != nil {
		return nil, err
	}
	env := []v1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	if s.checkpointURI != "" {
		env = append(env, v1.EnvVar{Name: "CHECKPOINT_URI", Value: s.checkpointURI})
	}
	mounts := []v1.VolumeMount{{Name: "podinfo", MountPath: podinfoDir, ReadOnly: true}}
	volumes := []v1.Volume{{Name: "podinfo", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
		Items: []v1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}},
	}}}}
	if s.checkpointPVC != "" {
		env = append(env, v1.EnvVar{Name: "CHECKPOINT_DIR", Value: s.checkpointDir})
		mounts = append(mounts, v1.VolumeMount{Name: "checkpoints", MountPath: s.checkpointDir})
		volumes = append(volumes, v1.Volume{Name: "checkpoints", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: s.checkpointPVC},
		}})
	}
	for _, e := range s.env {
		k, v, ok := strings.Cut(e, "=")
		if !ok || validation.IsEnvVarName(k) != nil {
			return nil, fmt.Errorf("--env %q: want NAME=VALUE with a valid variable name", e)
		}
		env = append(env, v1.EnvVar{Name: k, Value: v})
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "kubectl-gleaner", "app.kubernetes.io/name": name}
	annotations := map[string]string{}
	if s.checkpointInterval > 0 {
		annotations[api.AnnotationCheckpointInterval] = s.checkpointInterval.String()
	}
	gpus := resource.NewQuantity(s.gpus, resource.DecimalSI)
	pod := v1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec: v1.PodSpec{
			SchedulerName:                 api.SchedulerName,
			PriorityClassName:             api.PriorityClassBestEffort,
			TerminationGracePeriodSeconds: ptr.To(int64(s.grace / time.Second)),
			RestartPolicy:                 v1.RestartPolicyNever,
			ServiceAccountName:            s.serviceAccount,
			Containers: []v1.Container{{
				Name: "main", Image: s.image, Command: command, Env: env,
				Resources:    v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceName(s.gpuResource): *gpus}},
				VolumeMounts: mounts,
			}},
			Volumes: volumes,
		},
	}
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(3)),
			// An eviction (Gleaner reclaiming its GPUs) is no failure: the Job
			// makes the pod again and it resumes from its checkpoint.
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue}},
			}}},
			Template: pod,
		},
	}
	var out []*unstructured.Unstructured
	if s.gang > 0 {
		job.Spec.Parallelism, job.Spec.Completions = ptr.To(s.gang), ptr.To(s.gang)
		job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		job.Spec.Template.Labels[api.LabelPodGroup] = name
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": toAny(labels)},
			"spec":     map[string]any{"minMember": int64(s.gang)},
		}})
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
	if err != nil {
		return nil, err
	}
	unstructured.RemoveNestedField(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	return append(out, &unstructured.Unstructured{Object: u}), nil
}

// checkCheckpointFlags checks where the job's checkpoints are to live.
func (s *submitOptions) checkCheckpointFlags() error {
	if s.checkpointPVC != "" && s.checkpointURI != "" {
		return fmt.Errorf("--checkpoint-pvc and --checkpoint-uri name two places for the checkpoints: choose one")
	}
	if s.checkpointPVC != "" {
		if errs := validation.IsDNS1123Subdomain(s.checkpointPVC); len(errs) > 0 {
			return fmt.Errorf("--checkpoint-pvc %q is not a PersistentVolumeClaim name: %s", s.checkpointPVC, strings.Join(errs, "; "))
		}
	}
	if s.checkpointDirSet && s.checkpointPVC == "" {
		return fmt.Errorf("--checkpoint-dir is where --checkpoint-pvc is mounted: give --checkpoint-pvc too")
	}
	dir := path.Clean(s.checkpointDir)
	if !path.IsAbs(s.checkpointDir) || dir == "/" || dir == podinfoDir || strings.HasPrefix(dir, podinfoDir+"/") || strings.HasPrefix(podinfoDir, dir+"/") {
		return fmt.Errorf("--checkpoint-dir %q: want an absolute directory of its own (not /, and neither %s nor a directory in or above it)", s.checkpointDir, podinfoDir)
	}
	s.checkpointDir = dir
	if s.checkpointURI != "" {
		u, err := url.Parse(s.checkpointURI)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("--checkpoint-uri %q: want SCHEME://BUCKET/PREFIX, e.g. s3://my-bucket/llama (for a volume, use --checkpoint-pvc)", s.checkpointURI)
		}
	}
	return nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// workflow builds a run of an Argo WorkflowTemplate with the parameters given.
func (s *submitOptions) workflow(ns string, args []string) ([]*unstructured.Unstructured, error) {
	kind, name, ok := strings.Cut(s.from, "/")
	if !ok || !strings.EqualFold(kind, "workflowtemplate") || name == "" {
		return nil, fmt.Errorf("--from %q: want workflowtemplate/NAME", s.from)
	}
	if len(args) > 0 || s.image != "" || s.gang != 0 {
		return nil, fmt.Errorf("--from runs the template as it is: no NAME, command, --image or --gang (pass -p parameters)")
	}
	var params []any
	for _, p := range s.params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-p %q: want NAME=VALUE", p)
		}
		params = append(params, map[string]any{"name": k, "value": v})
	}
	spec := map[string]any{"workflowTemplateRef": map[string]any{"name": name}}
	if len(params) > 0 {
		spec["arguments"] = map[string]any{"parameters": params}
	}
	return []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
		"metadata": map[string]any{"generateName": name + "-", "namespace": ns,
			"labels": map[string]any{"app.kubernetes.io/managed-by": "kubectl-gleaner", "workflows.argoproj.io/workflow-template": name}},
		"spec": spec,
	}}}, nil
}
