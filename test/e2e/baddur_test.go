package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
)

var rolloutGVR = schema.GroupVersionResource{Group: "nodewise.io", Version: "v1alpha1", Resource: "noderollouts"}

// createRaw creates a NodeRollout from a JSON spec, past the typed client
// (which could not even hold a bad duration).
func createRaw(ctx context.Context, dyn dynamic.Interface, name, spec string) error {
	var s map[string]any
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodewise.io/v1alpha1", "kind": "NodeRollout", "metadata": map[string]any{"name": name}, "spec": s}}
	_, err := dyn.Resource(rolloutGVR).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// TestBadDurationCostsOnlyItsRollout: the CRD refuses every malformed
// duration with a message saying what a duration looks like (and a zero drain
// timeout, "forever" to the drain library). An object that holds one anyway,
// written under an older CRD, is refused by the orchestrator with a condition
// naming the field, and another rollout keeps rolling to completion: the
// cache every rollout is read from still syncs, and /healthz says ok.
func TestBadDurationCostsOnlyItsRollout(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ spec, want string }{
		{`{"soak":"10 minutes"}`, "spec.soak: Invalid value"},
		{`{"baseline":"banana"}`, "must be a duration such as 30s"},
		{`{"swapTimeout":"-5m"}`, "spec.swapTimeout"},
		{`{"drain":{"timeout":"5 m"}}`, "spec.drain.timeout"},
		{`{"drain":{"longLivedAfter":"1d"}}`, "spec.drain.longLivedAfter"},
		{`{"gates":{"interval":"1 minute"}}`, "spec.gates.interval"},
		{`{"drain":{"timeout":"0s"}}`, "drain.timeout must be positive (0 would wait forever)"},
		{`{"enrollmentTimeout":"soon"}`, "spec.enrollmentTimeout"},
		{`{"enrollmentTimeout":"0s"}`, "enrollmentTimeout must be positive"},
	} {
		err := createRaw(ctx, dyn, "refused", tc.spec)
		if err == nil {
			t.Errorf("the API server accepted %s", tc.spec)
			_ = dyn.Resource(rolloutGVR).Delete(ctx, "refused", metav1.DeleteOptions{})
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s refused with %q, want mention of %q", tc.spec, err, tc.want)
		}
	}
	if err := createRaw(ctx, dyn, "fine", `{"soak":"1h30m","baseline":"0","enrollmentTimeout":"45s","drain":{"timeout":"90s","longLivedAfter":"500ms"}}`); err != nil {
		t.Fatalf("good durations refused: %v", err)
	}
	_ = dyn.Resource(rolloutGVR).Delete(ctx, "fine", metav1.DeleteOptions{})

	// An older CRD without the check lets a bad soak in; the current one
	// then goes back on (stored objects are not re-validated).
	ax, err := apiextclient.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := ax.ApiextensionsV1().CustomResourceDefinitions()
	setSoakSchema := func(mut func(*apiextv1.JSONSchemaProps) apiextv1.JSONSchemaProps) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := crds.Get(ctx, "noderollouts.nodewise.io", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			old := spec.Properties["soak"]
			spec.Properties["soak"] = mut(&old)
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
			_, err = crds.Update(ctx, crd, metav1.UpdateOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("updating the CRD: %v", err)
		}
	}
	var current apiextv1.JSONSchemaProps
	setSoakSchema(func(p *apiextv1.JSONSchemaProps) apiextv1.JSONSchemaProps {
		current = *p.DeepCopy()
		return apiextv1.JSONSchemaProps{Type: "string"} // the older CRD: any string
	})
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return createRaw(ctx, dyn, "bad", `{"soak":"10 minutes","maxParallel":1,"maxUnavailable":1}`) == nil, nil
	}); err != nil {
		t.Fatalf("writing the bad rollout under the older CRD: %v", err)
	}
	setSoakSchema(func(*apiextv1.JSONSchemaProps) apiextv1.JSONSchemaProps { return current })

	e.upgrade("1.28.1")
	e.apply(rollout("good", nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	e.runInProcessWith("solo", func(c *orchestrator.Config) { c.MetricsAddr = metricsAddr })

	good := e.waitPhase("good", 3*time.Minute, v1alpha1.PhaseCompleted)
	if good.Status.Counts.Done != nodes {
		t.Errorf("good rollout: counts %+v", good.Status.Counts)
	}
	bad := e.waitPhase("bad", 30*time.Second, v1alpha1.PhasePending)
	if msg := conditionMessage(bad, "Valid"); !strings.Contains(msg, `spec.soak: "10 minutes" is not a duration`) {
		t.Errorf("bad rollout's Valid condition %q does not name spec.soak", msg)
	}
	if bad.Status.Counts.InProgress != 0 || bad.Status.Counts.Done != 0 {
		t.Errorf("bad rollout acted: counts %+v", bad.Status.Counts)
	}
	resp, err := http.Get("http://" + metricsAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz with synced caches: %d %s", resp.StatusCode, body)
	}
}
