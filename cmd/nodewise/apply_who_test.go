package main

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestApplyNamesWhoAsks runs the real binary's apply as three users (--as)
// against an API server enforcing deploy/'s admission policy
// nodewise-verb-requester: a re-applied file that pauses, unpauses (by
// leaving out the paused: it applied) or aborts a rollout is admitted and
// names the user who applied it; a re-apply that changes none of them
// changes nothing, and a rollout created paused names its creator. A plain
// server-side apply (kubectl's) that unpauses is refused with a message
// naming the annotation to set and the value.
func TestApplyNamesWhoAsks(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	ctx := context.Background()
	c, rc := requesterCluster(t, true)

	good := strings.Replace(goodRollout, "node-1", c.Nodes[0].Name, 1)
	apply := func(user, file, want string) {
		t.Helper()
		out, errOut, err := runIn(bin, file, "--kubeconfig="+c.Kubeconfig, "--as", user, "--as-group", "system:masters", "apply", "-f", "-")
		if err != nil || out != want {
			t.Fatalf("nodewise apply as %s: %v %q %q; want %q\n%s", user, err, out, errOut, want, file)
		}
	}
	check := func(name string, paused, abort bool, by map[string]string) {
		t.Helper()
		nr, err := rc.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if nr.Spec.Paused != paused || nr.Spec.Abort != abort {
			t.Errorf("%s: paused %v abort %v, want %v %v", name, nr.Spec.Paused, nr.Spec.Abort, paused, abort)
		}
		for _, key := range []string{model.AnnotationPausedBy, model.AnnotationResumedBy, model.AnnotationAbortedBy, model.AnnotationRolledBackBy, model.AnnotationNodeRequestBy} {
			if nr.Annotations[key] != by[key] {
				t.Errorf("%s: %s %q, want %q", name, key, nr.Annotations[key], by[key])
			}
		}
	}

	apply("alice", good, "noderollout.nodewise.io/up created\n")
	check("up", false, false, nil)
	paused := good + "  paused: true\n"
	apply("alice", paused, "noderollout.nodewise.io/up configured\n")
	check("up", true, false, map[string]string{model.AnnotationPausedBy: "alice"})
	// The same file again makes no verb: nothing changes, alice's name stays.
	apply("bob", paused, "noderollout.nodewise.io/up unchanged\n")
	check("up", true, false, map[string]string{model.AnnotationPausedBy: "alice"})
	// Leaving out the paused: this field manager applied removes it: a resume.
	apply("bob", good, "noderollout.nodewise.io/up configured\n")
	check("up", false, false, map[string]string{model.AnnotationPausedBy: "alice", model.AnnotationResumedBy: "bob"})
	apply("carol", good+"  abort: true\n", "noderollout.nodewise.io/up configured\n")
	check("up", false, true, map[string]string{model.AnnotationPausedBy: "alice", model.AnnotationResumedBy: "bob", model.AnnotationAbortedBy: "carol"})

	// A rollout created paused names who created it (the policy allows
	// that name, and only that one, on a create).
	fresh := strings.Replace(paused, "name: up", "name: fresh", 1)
	apply("alice", fresh, "noderollout.nodewise.io/fresh created\n")
	check("fresh", true, false, map[string]string{model.AnnotationPausedBy: "alice"})

	// A server-side apply as kubectl makes it (field manager kubectl,
	// --force-conflicts) that unpauses, without the annotation: refused,
	// saying what to add.
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "dave", Groups: []string{"system:masters"}}
	dave, err := v1alpha1.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte(`{"apiVersion":"nodewise.io/v1alpha1","kind":"NodeRollout","metadata":{"name":"fresh"},"spec":{"paused":false}}`)
	_, err = dave.NodeRollouts().Patch(ctx, "fresh", types.ApplyPatchType, doc, metav1.PatchOptions{FieldManager: "kubectl", Force: ptr.To(true)})
	if want := "annotation nodewise.io/resumed-by names who asks: set it to dave (the user you are authenticated as)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("kubectl-style apply unpausing without the annotation: %v; want refused with %q", err, want)
	}
	check("fresh", true, false, map[string]string{model.AnnotationPausedBy: "alice"})
}
