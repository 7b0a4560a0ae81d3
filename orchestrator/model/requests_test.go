package model

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestDueRequests(t *testing.T) {
	rec := func(verb, by string, gen int64, token string) v1alpha1.VerbRequest {
		return v1alpha1.VerbRequest{Verb: verb, By: by, Generation: gen, Token: token}
	}
	skipJSON := `{"token":"t9","verb":"skip","node":"n1","reason":"r","by":"carol"}`
	cases := []struct {
		name   string
		gen    int64
		spec   v1alpha1.NodeRolloutSpec
		ann    map[string]string
		status []v1alpha1.VerbRequest
		want   string // verb:by:node:token, in order
	}{
		{"created paused: no one to name", 1, v1alpha1.NodeRolloutSpec{Paused: true}, nil, nil, "[]"},
		{"a pause", 2, v1alpha1.NodeRolloutSpec{Paused: true}, map[string]string{AnnotationPausedBy: "alice"}, nil, "[pause:alice::]"},
		{"the same pause again", 2, v1alpha1.NodeRolloutSpec{Paused: true}, map[string]string{AnnotationPausedBy: "alice"},
			[]v1alpha1.VerbRequest{rec(VerbPause, "alice", 2, "")}, "[]"},
		{"a pause asked again by bob", 3, v1alpha1.NodeRolloutSpec{Paused: true}, map[string]string{AnnotationPausedBy: "bob"},
			[]v1alpha1.VerbRequest{rec(VerbPause, "alice", 2, "")}, "[pause:bob::]"},
		{"alice pauses again after a resume", 4, v1alpha1.NodeRolloutSpec{Paused: true}, map[string]string{AnnotationPausedBy: "alice", AnnotationResumedBy: "bob"},
			[]v1alpha1.VerbRequest{rec(VerbPause, "alice", 2, ""), rec(VerbResume, "bob", 3, "")}, "[pause:alice::]"},
		{"a resume with a token", 3, v1alpha1.NodeRolloutSpec{}, map[string]string{AnnotationResumeToken: "t1", AnnotationResumedBy: "bob", AnnotationPausedBy: "alice"},
			[]v1alpha1.VerbRequest{rec(VerbPause, "alice", 2, "")}, "[resume:bob::t1]"},
		{"the same resume again", 3, v1alpha1.NodeRolloutSpec{}, map[string]string{AnnotationResumeToken: "t1", AnnotationResumedBy: "bob", AnnotationPausedBy: "alice"},
			[]v1alpha1.VerbRequest{rec(VerbPause, "alice", 2, ""), rec(VerbResume, "bob", 3, "t1")}, "[]"},
		{"unpaused again after a later pause, no token", 5, v1alpha1.NodeRolloutSpec{}, map[string]string{AnnotationResumeToken: "t1", AnnotationResumedBy: "bob", AnnotationPausedBy: "alice"},
			[]v1alpha1.VerbRequest{rec(VerbPause, "alice", 4, ""), rec(VerbResume, "bob", 3, "t1")}, "[resume:bob::t1]"},
		{"a resume of a halt, the same generation as its pause", 2, v1alpha1.NodeRolloutSpec{Paused: true}, map[string]string{AnnotationResumeToken: "t2", AnnotationResumedBy: "bob", AnnotationPausedBy: "alice"},
			[]v1alpha1.VerbRequest{rec(VerbPause, "alice", 2, ""), rec(VerbResume, "bob", 1, "t1")}, "[resume:bob::t2]"},
		{"an old resume token, nobody named", 3, v1alpha1.NodeRolloutSpec{}, map[string]string{AnnotationResumeToken: "t0"}, nil, "[]"},
		{"abort and rollback", 6, v1alpha1.NodeRolloutSpec{Abort: true, Rollback: true}, map[string]string{AnnotationAbortedBy: "alice", AnnotationRolledBackBy: "bob"},
			[]v1alpha1.VerbRequest{rec(VerbRollback, "bob", 5, "")}, "[abort:alice::]"},
		{"a skip: who is the annotation, not the JSON", 2, v1alpha1.NodeRolloutSpec{}, map[string]string{AnnotationNodeRequest: skipJSON, AnnotationNodeRequestBy: "bob"},
			nil, "[skip:bob:n1:t9]"},
		{"the skip acknowledged before it was recorded", 2, v1alpha1.NodeRolloutSpec{}, map[string]string{AnnotationNodeRequest: skipJSON, AnnotationNodeRequestBy: "bob", AnnotationAckedNodeRequest: "t9"},
			nil, "[]"},
		{"the skip recorded", 2, v1alpha1.NodeRolloutSpec{}, map[string]string{AnnotationNodeRequest: skipJSON, AnnotationNodeRequestBy: "bob"},
			[]v1alpha1.VerbRequest{rec(VerbSkip, "bob", 2, "t9")}, "[]"},
		{"a skip naming no one", 2, v1alpha1.NodeRolloutSpec{}, map[string]string{AnnotationNodeRequest: skipJSON}, nil, "[]"},
	}
	for _, tc := range cases {
		nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Generation: tc.gen, Annotations: tc.ann}, Spec: tc.spec, Status: v1alpha1.NodeRolloutStatus{Requests: tc.status}}
		var got []string
		for _, r := range DueRequests(nr, metav1.Now()) {
			if r.Generation != tc.gen || r.At.IsZero() {
				t.Errorf("%s: %+v: want generation %d and a time", tc.name, r, tc.gen)
			}
			got = append(got, fmt.Sprintf("%s:%s:%s:%s", r.Verb, r.By, r.Node, r.Token))
		}
		if fmt.Sprint(got) != tc.want && !(len(got) == 0 && tc.want == "[]") {
			t.Errorf("%s: due %v, want %s", tc.name, got, tc.want)
		}
	}
}
