package write

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestSetFinalizer: FinalizerReleaseNodes is added or removed from a fresh
// read, every other finalizer kept, with an event on release; nothing is
// written when it is already as asked or the object was replaced; the API's
// errors are returned, naming what failed.
func TestSetFinalizer(t *testing.T) {
	const other = "example.com/keep"
	for _, tc := range []struct {
		name      string
		stored    []string // the API's finalizers
		uid       string   // the stored object's UID, when not r-uid
		missing   bool
		fail      error // answer to the patch
		on        bool
		wantErr   func(error) bool
		wantMsg   string
		wantPatch bool
		wantFins  []string
		wantEvent bool
	}{
		{name: "added", stored: []string{other}, on: true, wantPatch: true, wantFins: []string{other, model.FinalizerReleaseNodes}},
		{name: "already there", stored: []string{model.FinalizerReleaseNodes}, on: true, wantFins: []string{model.FinalizerReleaseNodes}},
		{name: "removed, with an event", stored: []string{model.FinalizerReleaseNodes, other}, wantPatch: true, wantFins: []string{other}, wantEvent: true},
		{name: "removed, the last one", stored: []string{model.FinalizerReleaseNodes}, wantPatch: true, wantEvent: true},
		{name: "already gone", stored: []string{other}, wantFins: []string{other}},
		{name: "replaced by a new object meanwhile", uid: "new-uid", on: true},
		{name: "rollout gone", missing: true, on: true, wantErr: apierrors.IsNotFound, wantMsg: "reading NodeRollout r for its finalizer"},
		{
			name: "adding forbidden", on: true, fail: apierrors.NewForbidden(rolloutsGR, "r", errors.New("rbac")),
			wantPatch: true, wantErr: apierrors.IsForbidden, wantMsg: "adding NodeRollout r's finalizer",
		},
		{
			name: "removing forbidden", stored: []string{model.FinalizerReleaseNodes}, fail: apierrors.NewForbidden(rolloutsGR, "r", errors.New("rbac")),
			wantPatch: true, wantErr: apierrors.IsForbidden, wantMsg: "removing NodeRollout r's finalizer", wantFins: []string{model.FinalizerReleaseNodes},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := fixture.NewRollouts()
			if !tc.missing {
				nr := testRollout("r")
				nr.Finalizers = tc.stored
				if tc.uid != "" {
					nr.UID = "new-uid"
				}
				api.Put(nr)
			}
			if tc.fail != nil {
				api.Fail = failVerb("patch", tc.fail)
			}
			events := record.NewFakeRecorder(10)
			err := SetFinalizer(t.Context(), api, events, testRollout("r"), tc.on)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("SetFinalizer: %v", err)
			case tc.wantErr != nil && (!tc.wantErr(err) || !strings.Contains(err.Error(), tc.wantMsg)):
				t.Fatalf("err = %v; want the API's error with %q", err, tc.wantMsg)
			}
			if got := countCalls(api, "patch r"); got != map[bool]int{true: 1}[tc.wantPatch] {
				t.Errorf("%d patches; want patch=%v", got, tc.wantPatch)
			}
			if !tc.missing {
				if got := api.Stored("r").Finalizers; !slices.Equal(got, tc.wantFins) {
					t.Errorf("finalizers = %v; want %v", got, tc.wantFins)
				}
			}
			ev := drainEvents(events)
			if tc.wantEvent != (len(ev) == 1 && strings.Contains(ev[0], "Normal Released rollout r deleted")) || len(ev) > 1 {
				t.Errorf("events = %v; want the release event: %v", ev, tc.wantEvent)
			}
		})
	}
}

// racingRollouts is the fake NodeRollout API with a user's write landing
// between SetFinalizer's read and its patch.
type racingRollouts struct {
	*fixture.Rollouts
	afterGet func()
}

func (r racingRollouts) Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1alpha1.NodeRollout, error) {
	nr, err := r.Rollouts.Get(ctx, name, opts)
	r.afterGet()
	return nr, err
}

// TestSetFinalizerConflict: the patch is conditional on the resourceVersion
// read, so a user's write in between (here, another finalizer) is a 409,
// returned as an error for the next pass, and the user's write stands.
func TestSetFinalizerConflict(t *testing.T) {
	api := fixture.NewRollouts(testRollout("r"))
	racing := racingRollouts{Rollouts: api, afterGet: func() {
		nr := api.Stored("r")
		nr.Finalizers = []string{"example.com/user"}
		api.Put(nr)
	}}
	events := record.NewFakeRecorder(10)
	err := SetFinalizer(t.Context(), racing, events, testRollout("r"), true)
	if !apierrors.IsConflict(err) {
		t.Fatalf("err = %v; want a conflict", err)
	}
	if got := api.Stored("r").Finalizers; !slices.Equal(got, []string{"example.com/user"}) {
		t.Errorf("finalizers = %v; want the user's write kept", got)
	}
}
