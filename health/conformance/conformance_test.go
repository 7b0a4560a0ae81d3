package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestJobNameIsStableAndValid(t *testing.T) {
	long := strings.Repeat("migration.", 20)
	for _, owner := range []string{"m", "mig.v2", long} {
		a, b := JobName(owner, "wave-3", 2), JobName(owner, "wave-3", 2)
		if a != b {
			t.Errorf("JobName(%q) differs between calls: %s, %s", owner, a, b)
		}
		if errs := validation.IsDNS1123Label(a); len(errs) != 0 {
			t.Errorf("JobName(%q) = %s: %v", owner, a, errs)
		}
		if a == JobName(owner, "wave-3", 3) || a == JobName(owner, "wave-2", 2) {
			t.Errorf("JobName(%q) does not tell steps and attempts apart", owner)
		}
	}
	if JobName(long, StepStart, 1) == JobName(long+"x", StepStart, 1) {
		t.Error("two long owners share a Job name")
	}
}

func TestBeginStartsOnlyNewRuns(t *testing.T) {
	now := time.Unix(100, 0)
	rec, begin := Begin(nil, "m", "qa", StepStart, now)
	if !begin || rec.Attempt != 1 || rec.Job != JobName("m", StepStart, 1) || rec.Outcome != v1alpha1.ConformanceRunning {
		t.Fatalf("first run: %+v begin %v", rec, begin)
	}
	if _, begin := Begin(&rec, "m", "qa", StepStart, now.Add(time.Minute)); begin {
		t.Error("a running run begun again")
	}
	rec.Outcome = v1alpha1.ConformanceFailed
	next, begin := Begin(&rec, "m", "qa", StepStart, now.Add(time.Minute))
	if !begin || next.Attempt != 2 || next.Job == rec.Job {
		t.Errorf("after a failure (resumed): %+v begin %v, want attempt 2", next, begin)
	}
	rec.Outcome = v1alpha1.ConformancePassed
	if other, begin := Begin(&rec, "m", "qa", StepBeforeWave(1), now); !begin || other.Attempt != 1 || other.Step != "wave-1" {
		t.Errorf("next point: %+v begin %v", other, begin)
	}
}

// Check creates the run's Job once, with the owner, deadline and
// environment, and judges it by its conditions, the timeout and its pod's logs.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	owner := metav1.OwnerReference{APIVersion: "nodewise.io/v1alpha1", Kind: "RevisionMigration", Name: "m", UID: "u1"}
	r := Runner{Kube: kube, Owner: owner, Env: map[string]string{"NODEWISE_REVISION": "1-28"}, Gate: v1alpha1.ConformanceGate{
		Namespace: "qa", Timeout: &v1alpha1.Duration{Duration: time.Minute}, LogLines: 2,
		JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "suite", Image: "suite:1"}}}}}}}}
	start := time.Unix(1000, 0)
	rec, _ := Begin(nil, "m", "qa", StepStart, start)
	for i := 0; i < 2; i++ {
		res, err := r.Check(ctx, rec, start.Add(time.Second))
		if err != nil || res.Outcome != v1alpha1.ConformanceRunning {
			t.Fatalf("check %d: %+v %v, want Running", i, res, err)
		}
	}
	jobs, _ := kube.BatchV1().Jobs("qa").List(ctx, metav1.ListOptions{})
	if len(jobs.Items) != 1 {
		t.Fatalf("%d Jobs after two checks, want 1", len(jobs.Items))
	}
	job := &jobs.Items[0]
	if job.Name != rec.Job || job.OwnerReferences[0].UID != "u1" || *job.Spec.ActiveDeadlineSeconds != 60 || job.Labels[LabelStep] != StepStart {
		t.Fatalf("Job %s owners %v deadline %d labels %v", job.Name, job.OwnerReferences, *job.Spec.ActiveDeadlineSeconds, job.Labels)
	}
	if env := job.Spec.Template.Spec.Containers[0].Env; len(env) != 2 || env[0].Value != StepStart || env[1].Value != "1-28" {
		t.Errorf("container env %v", env)
	}
	// Past its timeout it fails, with its pod's log lines (the fake
	// clientset's logs read "fake logs").
	job.UID = "j1"
	if _, err := kube.BatchV1().Jobs("qa").Update(ctx, job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("qa").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: rec.Job + "-x", Namespace: "qa",
		Labels: map[string]string{batchv1.ControllerUidLabel: "j1"}}, Spec: job.Spec.Template.Spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Check(ctx, rec, start.Add(2*time.Minute))
	if err != nil || res.Outcome != v1alpha1.ConformanceFailed || !strings.Contains(res.Message, "timed out") ||
		!strings.Contains(res.Message, "qa/"+rec.Job) || !strings.Contains(res.Message, "last log lines of pod "+rec.Job+"-x: fake logs") {
		t.Fatalf("timed out: %+v %v", res, err)
	}
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}
	if _, err := kube.BatchV1().Jobs("qa").UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, _ := r.Check(ctx, rec, start.Add(time.Second)); res.Outcome != v1alpha1.ConformanceFailed || !strings.Contains(res.Message, "failed: BackoffLimitExceeded") {
		t.Fatalf("failed Job: %+v", res)
	}
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	if _, err := kube.BatchV1().Jobs("qa").UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, _ := r.Check(ctx, rec, start.Add(time.Second)); res.Outcome != v1alpha1.ConformancePassed {
		t.Fatalf("complete Job: %+v", res)
	}
	// Someone else's Job under the run's name is not taken for ours.
	other := Runner{Kube: kube, Owner: metav1.OwnerReference{Name: "m", UID: "u2"}, Gate: r.Gate}
	if res, _ := other.Check(ctx, rec, start); res.Outcome != v1alpha1.ConformanceFailed || !strings.Contains(res.Message, "is not this") {
		t.Fatalf("a foreign Job: %+v", res)
	}
}

// Validate refuses nodewise's own ServiceAccounts before asking the server.
func TestValidateRefusesOwnServiceAccount(t *testing.T) {
	kube := fake.NewClientset()
	r := Runner{Kube: kube, Owner: metav1.OwnerReference{Name: "m"}, Gate: v1alpha1.ConformanceGate{Namespace: "nodewise-system",
		JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			ServiceAccountName: "nodewise-orchestrator", Containers: []corev1.Container{{Name: "suite", Image: "suite:1"}}}}}}}}
	refusal, err := r.Validate(context.Background())
	if err != nil || !strings.Contains(refusal, "nodewise-orchestrator") {
		t.Fatalf("Validate = %q, %v; want a refusal naming the ServiceAccount", refusal, err)
	}
	r.Gate.JobTemplate.Spec.Template.Spec.ServiceAccountName = "mesh-suite"
	if refusal, err := r.Validate(context.Background()); err != nil || refusal != "" {
		t.Fatalf("Validate of the suite's own ServiceAccount = %q, %v", refusal, err)
	}
}
