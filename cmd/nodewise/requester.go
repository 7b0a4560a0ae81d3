package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// requesterRollouts is a NodeRollout client whose patches name who asks for
// the verbs they make: a merge patch for each verb it mentions
// (stampRequester), a server-side apply for each verb its change of the live
// object makes (stampApply). The admission policy nodewise-verb-requester
// refuses a verb whose annotation is not the user the API server
// authenticates, and the orchestrator records that user in status.requests
// and an Event. pause, resume, abort, rollback, apply and the dashboard's
// actions patch through it.
type requesterRollouts struct {
	v1alpha1.NodeRolloutInterface
	kube kubernetes.Interface

	mu   sync.Mutex
	user string // as the API server answered, once
}

func (r *requesterRollouts) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1alpha1.NodeRollout, error) {
	if len(subresources) == 0 {
		var err error
		switch pt {
		case types.MergePatchType:
			var user string
			if user, err = r.whoAmI(ctx); err == nil {
				data, err = stampRequester(data, user)
			}
		case types.ApplyPatchType:
			data, err = r.stampApply(ctx, name, data, opts.FieldManager)
		}
		if err != nil {
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
	ann = annotationsOf(p)
	for _, k := range keys {
		ann[k] = user
	}
	return json.Marshal(p)
}

// annotationsOf is the metadata.annotations of a patch or apply
// configuration, added when it has none.
func annotationsOf(p map[string]any) map[string]any {
	meta, _ := p["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		p["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	return ann
}

// verbFields are what a verb changes of a NodeRollout.
type verbFields struct {
	paused, abort, rollback  bool
	resumeToken, nodeRequest string
}

// requesterKeys are the annotations naming who asks, one per verb a write
// from before to after makes, as the policy nodewise-verb-requester reads
// them. A create (before nil) makes none; a rollout created paused,
// aborting or rolling back may still name who created it, and does.
func requesterKeys(before *verbFields, after verbFields) map[string]bool {
	if before == nil {
		before = &verbFields{resumeToken: after.resumeToken, nodeRequest: after.nodeRequest}
	}
	keys := map[string]bool{
		model.AnnotationPausedBy:      after.paused && !before.paused,
		model.AnnotationResumedBy:     (before.paused && !after.paused) || after.resumeToken != before.resumeToken,
		model.AnnotationAbortedBy:     after.abort != before.abort,
		model.AnnotationRolledBackBy:  after.rollback != before.rollback,
		model.AnnotationNodeRequestBy: after.nodeRequest != before.nodeRequest,
	}
	for k, made := range keys {
		if !made {
			delete(keys, k)
		}
	}
	return keys
}

// requesterAnnotations are the annotations naming who asked, one per verb.
var requesterAnnotations = []string{model.AnnotationPausedBy, model.AnnotationResumedBy, model.AnnotationAbortedBy, model.AnnotationRolledBackBy, model.AnnotationNodeRequestBy}

// stampApply adds to a server-side apply configuration of NodeRollout name,
// applied by field manager manager, the annotation naming who asks for each
// verb the apply makes: what it changes of the live object, a field this
// manager applied before and the configuration now leaves out counting as
// removed (the apply removes it). The other annotations naming who asked
// are left out of the configuration, so the live ones stay, but for those
// only this manager applied, which it keeps as they are.
func (r *requesterRollouts) stampApply(ctx context.Context, name string, doc []byte, manager string) ([]byte, error) {
	var p map[string]any
	if err := json.Unmarshal(doc, &p); err != nil {
		return nil, fmt.Errorf("reading a NodeRollout apply configuration: %w", err)
	}
	live, err := r.NodeRolloutInterface.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return nil, fmt.Errorf("reading NodeRollout %s, to name who asks for what the apply changes: %w", name, err)
	}
	spec, _ := p["spec"].(map[string]any)
	meta, _ := p["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	// applied is the field's value after the apply: the configuration's,
	// else none where only this apply set it, else the live one.
	applied := func(conf map[string]any, key string, zero, current any, path ...string) any {
		if v, ok := conf[key]; ok {
			return v
		}
		if live != nil && appliedOnlyBy(live, manager, path...) {
			return zero
		}
		return current
	}
	var before *verbFields
	cur := verbFields{}
	if live != nil {
		cur = verbFields{live.Spec.Paused, live.Spec.Abort, live.Spec.Rollback, live.Annotations[model.AnnotationResumeToken], live.Annotations[model.AnnotationNodeRequest]}
		before = &cur
	}
	var after verbFields
	after.paused, _ = applied(spec, "paused", false, cur.paused, "f:spec", "f:paused").(bool)
	after.abort, _ = applied(spec, "abort", false, cur.abort, "f:spec", "f:abort").(bool)
	after.rollback, _ = applied(spec, "rollback", false, cur.rollback, "f:spec", "f:rollback").(bool)
	after.resumeToken, _ = applied(ann, model.AnnotationResumeToken, "", cur.resumeToken, "f:metadata", "f:annotations", "f:"+model.AnnotationResumeToken).(string)
	after.nodeRequest, _ = applied(ann, model.AnnotationNodeRequest, "", cur.nodeRequest, "f:metadata", "f:annotations", "f:"+model.AnnotationNodeRequest).(string)
	stamp := requesterKeys(before, after)
	var user string
	if len(stamp) > 0 {
		if user, err = r.whoAmI(ctx); err != nil {
			return nil, err
		}
	}
	ann = annotationsOf(p)
	for _, k := range requesterAnnotations {
		switch {
		case stamp[k]:
			ann[k] = user
		case live != nil && appliedOnlyBy(live, manager, "f:metadata", "f:annotations", "f:"+k):
			ann[k] = live.Annotations[k]
		default:
			delete(ann, k)
		}
	}
	if len(ann) == 0 {
		delete(p["metadata"].(map[string]any), "annotations")
	}
	return json.Marshal(p)
}

// appliedOnlyBy reports whether field manager manager's apply owns the field
// at path (a managedFields path: "f:spec", "f:paused") of live and no other
// manager does: then leaving it out of that manager's next apply removes it.
func appliedOnlyBy(live *v1alpha1.NodeRollout, manager string, path ...string) bool {
	mine := false
	for _, m := range live.ManagedFields {
		if m.Subresource != "" || m.FieldsV1 == nil {
			continue
		}
		var f map[string]any
		if json.Unmarshal(m.FieldsV1.Raw, &f) != nil {
			continue
		}
		for _, k := range path {
			f, _ = f[k].(map[string]any)
		}
		if f == nil {
			continue
		}
		if m.Manager != manager || m.Operation != metav1.ManagedFieldsOperationApply {
			return false
		}
		mine = true
	}
	return mine
}
