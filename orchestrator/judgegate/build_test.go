package judgegate

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The agent address of a node is read once per ttl, not once per sample; a
// node without one is an error that is not kept.
func TestAgentURLsReadEachNodeOncePerTTL(t *testing.T) {
	kube := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "n1"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare"}})
	now := time.Unix(1000, 0)
	u := &agentURLs{kube: kube, port: 9443, ttl: time.Minute, now: func() time.Time { return now }, known: map[string]knownURL{}}
	gets := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
				n++
			}
		}
		return n
	}
	ctx := context.Background()
	for range 10 {
		url, err := u.of(ctx, "n1")
		if err != nil || url != "https://10.0.0.1:9443" {
			t.Fatalf("of(n1) = %q, %v", url, err)
		}
	}
	if g := gets(); g != 1 {
		t.Errorf("%d GETs of the Node for 10 lookups within the ttl, want 1", g)
	}
	now = now.Add(time.Minute)
	if _, err := u.of(ctx, "n1"); err != nil || gets() != 2 {
		t.Errorf("after the ttl: %v, %d GETs; want the Node read again", err, gets())
	}
	for range 2 {
		if _, err := u.of(ctx, "bare"); err == nil || !strings.Contains(err.Error(), "no InternalIP") {
			t.Errorf("of(bare) = %v; want no InternalIP", err)
		}
	}
	if _, err := u.of(ctx, "gone"); err == nil || !strings.Contains(err.Error(), "finding the agent of node gone") {
		t.Errorf("of(gone) = %v", err)
	}
	if g := gets(); g != 5 {
		t.Errorf("%d GETs; want the failed reads made each time (2 of bare, 1 of gone)", g)
	}
}
