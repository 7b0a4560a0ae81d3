package v1alpha1

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestClientSpeaksBothResources: the one typed client reaches each resource
// at its path, sends bodies that carry their kind (the API server rejects
// one without) and decodes the answers into the typed objects.
func TestClientSpeaksBothResources(t *testing.T) {
	type call struct{ method, path, apiVersion, kind string }
	var calls []call
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var tm metav1.TypeMeta
		if len(b) > 0 {
			if err := json.Unmarshal(b, &tm); err != nil {
				t.Errorf("%s %s: body is not JSON: %v", r.Method, r.URL.Path, err)
			}
		}
		calls = append(calls, call{r.Method, r.URL.Path, tm.APIVersion, tm.Kind})
		w.Header().Set("Content-Type", "application/json")
		switch {
		case len(b) > 0:
			_, _ = w.Write(b) // echo the object back
		case r.URL.Path == "/apis/nodewise.io/v1alpha1/noderollouts/mesh":
			_, _ = io.WriteString(w, `{"apiVersion":"nodewise.io/v1alpha1","kind":"NodeRollout","metadata":{"name":"mesh"},"status":{"nodes":[{"name":"w1","state":"Done","judgement":{"judgements":2,"intervalOutcome":"Fail","rows":[{"metric":"srtt","before":"a","after":"b"}]}}]}}`)
		default:
			_, _ = io.WriteString(w, `{"apiVersion":"nodewise.io/v1alpha1","kind":"RevisionMigrationList","items":[{"metadata":{"name":"m1"}}]}`)
		}
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nr, err := c.NodeRollouts().Get(ctx, "mesh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j := nr.Status.Nodes[0].Judgement; j == nil || j.IntervalOutcome != OutcomeFail || j.Rows[0].Metric != MetricSRTT {
		t.Errorf("judgement decoded as %+v", j)
	}
	if _, err := c.NodeRollouts().UpdateStatus(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := c.RevisionMigrations().List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "m1" {
		t.Fatalf("list: %+v %v", l, err)
	}
	if _, err := c.RevisionMigrations().Create(ctx, &RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "m2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []call{
		{"GET", "/apis/nodewise.io/v1alpha1/noderollouts/mesh", "", ""},
		{"PUT", "/apis/nodewise.io/v1alpha1/noderollouts/mesh/status", "nodewise.io/v1alpha1", "NodeRollout"},
		{"GET", "/apis/nodewise.io/v1alpha1/revisionmigrations", "", ""},
		{"POST", "/apis/nodewise.io/v1alpha1/revisionmigrations", "nodewise.io/v1alpha1", "RevisionMigration"},
	}
	if len(calls) != len(want) {
		t.Fatalf("calls %+v, want %+v", calls, want)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], want[i])
		}
	}
}
