package metrics

import (
	"net/http"
	"net/url"
	"testing"
)

func TestClassifyRequests(t *testing.T) {
	cases := []struct{ method, path, query, verb, resource string }{
		{"GET", "/api/v1/nodes", "", "list", "nodes"},
		{"GET", "/api/v1/nodes", "watch=true", "watch", "nodes"},
		{"GET", "/api/v1/nodes/node-001", "", "get", "nodes"},
		{"PATCH", "/api/v1/nodes/node-001", "", "patch", "nodes"},
		{"DELETE", "/api/v1/namespaces/istio-system/pods/ztunnel-x", "", "delete", "pods"},
		{"POST", "/api/v1/namespaces/shop/pods/cart/eviction", "", "create", "pods/eviction"},
		{"PUT", "/apis/nodewise.io/v1alpha1/noderollouts/r1/status", "", "update", "noderollouts/status"},
		{"GET", "/apis/apps/v1/namespaces/istio-system/controllerrevisions", "", "list", "controllerrevisions"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/nodewise-orchestrator", "", "update", "leases"},
		{"GET", "/api/v1/namespaces/default", "", "get", "namespaces"},
	}
	for _, c := range cases {
		r := &http.Request{Method: c.method, URL: &url.URL{Path: c.path, RawQuery: c.query}}
		verb, res := classify(r)
		if verb != c.verb || res != c.resource {
			t.Errorf("%s %s?%s = %s %s, want %s %s", c.method, c.path, c.query, verb, res, c.verb, c.resource)
		}
	}
}
