package swap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// swapsOver are both swaps over caches holding ds, its newest revision
// (hash "new") and pods, writing through kube.
func swapsOver(t *testing.T, kube *fake.Clientset, ds *appsv1.DaemonSet, pods ...*corev1.Pod) map[model.SwapKind]Swapper {
	t.Helper()
	c := newCaches(ds, pods...)
	w := Waits{Targets: c.targets, Changes: &observe.Changes{}, Now: time.Now}
	return map[model.SwapKind]Swapper{
		model.SwapReplace: Replace{Waits: w, Kube: kube, Log: zap.NewNop()},
		model.SwapSurge:   Surge{Waits: w, Kube: kube, Log: zap.NewNop(), DaemonSets: c.targets.DaemonSets, Revisions: c.targets.Revisions, Pods: c.targets.Pods},
	}
}

// TestSwapForbiddenDeleteHalts: #27 finding 3. A pod delete the API server
// refuses (403 Forbidden: RBAC, an admission policy) during a swap ends the
// node's step with a halt that carries the API's reason, for both swap
// kinds; it used to be a plain error, the worker retried on every pass and
// the node read Progressing forever.
func TestSwapForbiddenDeleteHalts(t *testing.T) {
	forbid := func(kube *fake.Clientset) {
		kube.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, a.(k8stesting.DeleteAction).GetName(),
				errors.New(`ValidatingAdmissionPolicy 'guard' denied request`))
		})
	}
	t.Run("replace", func(t *testing.T) {
		old := fixture.SurgePod("old", "old", 0)
		kube := fake.NewClientset(old.DeepCopy())
		forbid(kube)
		err := swapsOver(t, kube, fixture.SurgeDS, old)[model.SwapReplace].Swap(context.Background(), fixture.ZtunnelTarget, "n1", time.Now().Add(time.Minute), time.Minute)
		var se *nodestep.StepError
		if !errors.As(err, &se) || se.Halt != nodestep.HaltSwapFailed || !strings.Contains(se.Reason, "denied") {
			t.Fatalf("replace swap with a forbidden delete: %v; want a %s halt with the API's reason", err, nodestep.HaltSwapFailed)
		}
	})
	t.Run("surge", func(t *testing.T) {
		old, b := fixture.SurgePod("old", "old", 0), fixture.SurgePod("b", "new", time.Hour, fixture.Bridged)
		kube := fake.NewClientset(old.DeepCopy(), b.DeepCopy())
		forbid(kube)
		err := swapsOver(t, kube, fixture.SurgeDS, old, b)[model.SwapSurge].Swap(context.Background(), fixture.ZtunnelTarget, "n1", time.Now().Add(time.Minute), time.Minute)
		var se *nodestep.StepError
		if !errors.As(err, &se) || se.Halt != nodestep.HaltSwapFailed || !strings.Contains(se.Reason, "denied") {
			t.Fatalf("surge swap with a forbidden delete: %v; want a %s halt with the API's reason", err, nodestep.HaltSwapFailed)
		}
	})
}
