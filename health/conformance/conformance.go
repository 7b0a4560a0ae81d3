// Package conformance runs a rollout's or migration's conformance gate: the
// user's Job (spec.gates.conformance), created once per gated point and
// attempt under a name derived from them, judged by the Job's conditions and
// a timeout, its failure told with the last log lines of its pod.
//
// The caller persists the run (Begin) before Check creates its Job, so a
// restarted controller finds the Job by name instead of creating a second.
package conformance

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// The points a conformance Job gates (ConformanceStatus.Step).
const (
	StepStart       = "start"
	StepAfterCanary = "after-canary"
)

// StepBeforeWave is the point before a migration's wave (StepStart before the first).
func StepBeforeWave(wave int32) string {
	if wave == 0 {
		return StepStart
	}
	return fmt.Sprintf("wave-%d", wave)
}

// LabelStep is the label on each conformance Job naming the point it gates;
// LabelOwner names the NodeRollout or RevisionMigration (cut to a label value).
const (
	LabelStep  = "nodewise.io/conformance-step"
	LabelOwner = "nodewise.io/conformance-of"
)

// JobName is the Job of one attempt at one point of one owner: the same
// inputs always give the same name, a valid Job name of at most 63
// characters (the job-name label its pods carry is a label value).
func JobName(owner, step string, attempt int32) string {
	name := fmt.Sprintf("%s-conformance-%s-%d", strings.ReplaceAll(owner, ".", "-"), step, attempt)
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	tail := fmt.Sprintf("-%s-%d-%s", step, attempt, hex.EncodeToString(sum[:])[:8])
	return strings.TrimRight(name[:63-len(tail)], "-") + tail
}

// Begin says whether the point step needs a new run, and returns its record:
// when rec is for another point, or rec's run of this point failed (the
// caller is past the halt: a person resumed it), a new attempt starts now.
// The caller persists the record before calling Check. It is pure.
func Begin(rec *v1alpha1.ConformanceStatus, owner, namespace, step string, now time.Time) (v1alpha1.ConformanceStatus, bool) {
	attempt := int32(1)
	if rec != nil && rec.Step == step {
		if rec.Outcome != v1alpha1.ConformanceFailed {
			return *rec, false
		}
		attempt = rec.Attempt + 1
	}
	return v1alpha1.ConformanceStatus{Step: step, Attempt: attempt, Job: JobName(owner, step, attempt), Namespace: namespace,
		StartedAt: metav1.NewTime(now), Outcome: v1alpha1.ConformanceRunning}, true
}

// Result is what Check found: the run's outcome and, unless Running, a
// one-line message saying why.
type Result struct {
	Outcome v1alpha1.ConformanceOutcome
	Message string
}

// Runner creates and reads conformance Jobs.
type Runner struct {
	Kube kubernetes.Interface
	// Owner is the NodeRollout or RevisionMigration the Jobs belong to
	// (deleting it deletes them).
	Owner metav1.OwnerReference
	Gate  v1alpha1.ConformanceGate
	// Env is added to every container of the Job, beside NODEWISE_STEP.
	Env map[string]string
}

// Job is the Job of the run rec: the template with the run's name,
// namespace, labels, owner, environment and deadline. It is pure.
func (r Runner) Job(rec v1alpha1.ConformanceStatus) *batchv1.Job {
	t := r.Gate.JobTemplate.DeepCopy()
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: rec.Job, Namespace: rec.Namespace, Labels: t.Labels, Annotations: t.Annotations,
		OwnerReferences: []metav1.OwnerReference{r.Owner},
	}, Spec: t.Spec}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[LabelStep] = rec.Step
	job.Labels[LabelOwner] = labelValue(r.Owner.Name)
	deadline := int64(Timeout(r.Gate) / time.Second)
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d > deadline {
		job.Spec.ActiveDeadlineSeconds = &deadline
	}
	env := []corev1.EnvVar{{Name: "NODEWISE_STEP", Value: rec.Step}}
	keys := make([]string, 0, len(r.Env))
	for k := range r.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: k, Value: r.Env[k]})
	}
	for i := range job.Spec.Template.Spec.Containers {
		c := &job.Spec.Template.Spec.Containers[i]
		c.Env = append(c.Env, env...)
	}
	return job
}

// labelValue cuts s to a label value (63 characters, alphanumeric at both ends).
func labelValue(s string) string {
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.TrimRight(s, "-_.")
}

// Planned says where the gate runs its Job, as `nodewise plan` and
// `revision migrate --dry-run` print it ("" without a gate): the points,
// the namespace and the timeout, and that a failure halts.
func Planned(gate *v1alpha1.ConformanceGate) string {
	if gate == nil {
		return ""
	}
	g := *gate
	where := "before the first node or wave"
	switch g.When {
	case v1alpha1.ConformanceAfterCanary:
		where = "before the first node, and again after the canaries before the nodes that follow"
	case v1alpha1.ConformanceEveryWave:
		where = "before each wave"
	}
	return fmt.Sprintf("Conformance: your Job runs in namespace %s %s; a failure or %s without an outcome halts, naming the Job and quoting its last log lines",
		g.Namespace, where, Timeout(g))
}

// Timeout is the gate's timeout with its default.
func Timeout(g v1alpha1.ConformanceGate) time.Duration {
	if g.Timeout != nil && g.Timeout.Duration > 0 {
		return g.Timeout.Duration
	}
	return v1alpha1.DefaultConformanceTimeout
}

// Validate asks the API server whether it would create the gate's Job (a
// dry run of the Job and of its pod: nothing is created), so a bad template,
// or a pod the namespace's PodSecurity level refuses, refuses the rollout before
// anything moves. It returns the refusal, the server's words, or "" when the
// server takes the Job; an error is a failure to ask (retry, refuse nothing).
func (r Runner) Validate(ctx context.Context) (string, error) {
	job := r.Job(v1alpha1.ConformanceStatus{Step: StepStart, Attempt: 1, Job: JobName(r.Owner.Name, StepStart, 1), Namespace: r.Gate.Namespace})
	// Whoever may write the policy must not get the controllers' own
	// credentials through its Job: it runs beside them.
	if sa := cmp.Or(job.Spec.Template.Spec.ServiceAccountName, job.Spec.Template.Spec.DeprecatedServiceAccount); strings.HasPrefix(sa, "nodewise-") {
		return fmt.Sprintf("gates.conformance: the Job may not run as nodewise's own ServiceAccount %s; give it one of its own", sa), nil
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, err := r.Kube.BatchV1().Jobs(job.Namespace).Create(ctx, job, dry)
	if err == nil {
		// Its pods too: the namespace's PodSecurity level is enforced on
		// pods only, and a Job whose pods are refused would wait for its
		// timeout with none.
		pod := &corev1.Pod{ObjectMeta: *job.Spec.Template.ObjectMeta.DeepCopy(), Spec: *job.Spec.Template.Spec.DeepCopy()}
		pod.Name, pod.Namespace = job.Name+"-dry-run", job.Namespace
		_, err = r.Kube.CoreV1().Pods(job.Namespace).Create(ctx, pod, dry)
	}
	switch {
	case err == nil, apierrors.IsAlreadyExists(err): // the run's Job exists: the server took it once
		return "", nil
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		return "gates.conformance: the API server refuses its Job: " + err.Error(), nil
	}
	return "", fmt.Errorf("checking gates.conformance's Job with a dry run: %w", err)
}

// Check looks at the run rec (persisted by the caller): it creates the
// run's Job when it does not exist (the name is the run's, so a second
// Check, by this controller or the next, finds the first one's Job), and
// judges it. A Complete Job passes (the caller deletes it with Remove once
// the pass is persisted: a Job gone before that would be created again); a
// Failed one, or one still running past the timeout, fails with its last
// log lines, and is kept to read. A new attempt deletes the step's previous
// failed Job.
func (r Runner) Check(ctx context.Context, rec v1alpha1.ConformanceStatus, now time.Time) (Result, error) {
	jobs := r.Kube.BatchV1().Jobs(rec.Namespace)
	ref := rec.Namespace + "/" + rec.Job
	job, err := jobs.Get(ctx, rec.Job, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if rec.Attempt > 1 {
			prev := JobName(r.Owner.Name, rec.Step, rec.Attempt-1)
			if err := jobs.Delete(ctx, prev, background()); err != nil && !apierrors.IsNotFound(err) {
				return Result{}, fmt.Errorf("deleting the previous conformance Job %s/%s: %w", rec.Namespace, prev, err)
			}
		}
		job, err = jobs.Create(ctx, r.Job(rec), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			job, err = jobs.Get(ctx, rec.Job, metav1.GetOptions{})
		}
		if err != nil {
			return Result{}, fmt.Errorf("creating conformance Job %s: %w", ref, err)
		}
	} else if err != nil {
		return Result{}, fmt.Errorf("reading conformance Job %s: %w", ref, err)
	}
	if !ownedBy(job, r.Owner) {
		return Result{Outcome: v1alpha1.ConformanceFailed, Message: fmt.Sprintf("conformance Job %s exists but is not this %s's (delete it, then resume)", ref, r.Owner.Kind)}, nil
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return Result{Outcome: v1alpha1.ConformancePassed, Message: fmt.Sprintf("conformance Job %s passed", ref)}, nil
		case batchv1.JobFailed:
			why := c.Reason
			if c.Message != "" {
				why += " (" + c.Message + ")"
			}
			return Result{Outcome: v1alpha1.ConformanceFailed, Message: fmt.Sprintf("conformance Job %s failed: %s; %s", ref, why, r.lastLines(ctx, job))}, nil
		}
	}
	if limit := Timeout(r.Gate); now.Sub(rec.StartedAt.Time) > limit {
		return Result{Outcome: v1alpha1.ConformanceFailed, Message: fmt.Sprintf("conformance Job %s timed out: not done after %s; %s", ref, limit, r.lastLines(ctx, job))}, nil
	}
	return Result{Outcome: v1alpha1.ConformanceRunning}, nil
}

// Remove deletes the run's Job and its pods (a passed run's once the pass
// is persisted, a running one's once an abort is).
func (r Runner) Remove(ctx context.Context, rec v1alpha1.ConformanceStatus) error {
	err := r.Kube.BatchV1().Jobs(rec.Namespace).Delete(ctx, rec.Job, background())
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting conformance Job %s/%s: %w", rec.Namespace, rec.Job, err)
	}
	return nil
}

func ownedBy(job *batchv1.Job, owner metav1.OwnerReference) bool {
	for _, o := range job.OwnerReferences {
		if o.UID == owner.UID {
			return true
		}
	}
	return false
}

func background() metav1.DeleteOptions {
	p := metav1.DeletePropagationBackground
	return metav1.DeleteOptions{PropagationPolicy: &p}
}

// lastLines reads the last log lines of the Job's most telling pod (the
// newest failed one, else the newest) through the API server, as one
// clause; when none can be read, it says why.
func (r Runner) lastLines(ctx context.Context, job *batchv1.Job) string {
	pods, err := r.Kube.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(job.UID)})
	if err != nil {
		return "no logs: listing its pods: " + cut(err.Error(), 200)
	}
	if len(pods.Items) == 0 {
		return "no logs: it has no pod left"
	}
	p := pods.Items
	sort.SliceStable(p, func(i, j int) bool {
		fi, fj := p[i].Status.Phase == corev1.PodFailed, p[j].Status.Phase == corev1.PodFailed
		if fi != fj {
			return fi
		}
		return p[j].CreationTimestamp.Before(&p[i].CreationTimestamp)
	})
	pod := p[0]
	container := failedContainer(pod)
	n := int64(r.Gate.LogLines)
	if n <= 0 {
		n = v1alpha1.DefaultConformanceLogLines
	}
	limit := int64(16 << 10)
	// Bounded: the API server dials the node's kubelet, which may not answer.
	logCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := r.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container, TailLines: &n, LimitBytes: &limit}).DoRaw(logCtx)
	if err != nil {
		return fmt.Sprintf("no logs from pod %s: %s", pod.Name, cut(err.Error(), 200))
	}
	var lines []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, cut(l, 200))
		}
	}
	if len(lines) > int(n) {
		lines = lines[len(lines)-int(n):]
	}
	if len(lines) == 0 {
		return fmt.Sprintf("pod %s logged nothing", pod.Name)
	}
	return fmt.Sprintf("last log lines of pod %s: %s", pod.Name, strings.Join(lines, " | "))
}

// failedContainer is the container whose logs say most: the first that
// exited non-zero, else the first.
func failedContainer(pod corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return cs.Name
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return pod.Spec.Containers[0].Name
	}
	return ""
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
