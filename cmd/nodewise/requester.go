package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// requesterRollouts is a NodeRollout client whose merge patches name who
// asks for the verbs they make (stampRequester): the admission policy
// nodewise-verb-requester refuses a verb whose annotation is not the user
// the API server authenticates, and the orchestrator records that user in
// status.requests and an Event. pause, resume, abort, rollback and the
// dashboard's actions patch through it.
type requesterRollouts struct {
	v1alpha1.NodeRolloutInterface
	kube kubernetes.Interface

	mu   sync.Mutex
	user string // as the API server answered, once
}

func (r *requesterRollouts) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1alpha1.NodeRollout, error) {
	if pt == types.MergePatchType && len(subresources) == 0 {
		user, err := r.whoAmI(ctx)
		if err != nil {
			return nil, err
		}
		if data, err = stampRequester(data, user); err != nil {
			return nil, err
		}
	}
	return r.NodeRolloutInterface.Patch(ctx, name, pt, data, opts, subresources...)
}

func (r *requesterRollouts) whoAmI(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.user == "" {
		user, err := whoAmI(ctx, r.kube)
		if err != nil {
			return "", err
		}
		r.user = user
	}
	return r.user, nil
}

// whoAmI is the user the API server authenticates these credentials as
// (SelfSubjectReview): the name each verb's request carries.
func whoAmI(ctx context.Context, kube kubernetes.Interface) (string, error) {
	r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server who you are (SelfSubjectReview), to name you as who asks: %w", err)
	}
	if r.Status.UserInfo.Username == "" {
		return "", fmt.Errorf("the API server's SelfSubjectReview names no user: a verb must name who asks")
	}
	return r.Status.UserInfo.Username, nil
}

// stampRequester adds to a NodeRollout merge patch, for each verb it makes,
// the annotation naming who asks: spec.paused true (pause), spec.paused
// false or a resume token (resume), spec.abort (abort), spec.rollback
// (rollback), a node request (skip, retry).
func stampRequester(patch []byte, user string) ([]byte, error) {
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("reading a NodeRollout patch: %w", err)
	}
	spec, _ := p["spec"].(map[string]any)
	meta, _ := p["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	var keys []string
	if paused, ok := spec["paused"].(bool); ok {
		keys = append(keys, map[bool]string{true: model.AnnotationPausedBy, false: model.AnnotationResumedBy}[paused])
	}
	for field, key := range map[string]string{"abort": model.AnnotationAbortedBy, "rollback": model.AnnotationRolledBackBy} {
		if _, ok := spec[field]; ok {
			keys = append(keys, key)
		}
	}
	for a, key := range map[string]string{model.AnnotationResumeToken: model.AnnotationResumedBy, model.AnnotationNodeRequest: model.AnnotationNodeRequestBy} {
		if _, ok := ann[a]; ok {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return patch, nil
	}
	if ann == nil {
		ann = map[string]any{}
	}
	for _, k := range keys {
		ann[k] = user
	}
	if meta == nil {
		meta = map[string]any{}
	}
	meta["annotations"], p["metadata"] = ann, meta
	return json.Marshal(p)
}
