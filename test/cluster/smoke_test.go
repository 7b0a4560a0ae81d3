package cluster

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSmoke(t *testing.T) {
	c := Start(t, Options{Nodes: 3, Zones: 2})
	nodes, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes", len(nodes.Items))
}
