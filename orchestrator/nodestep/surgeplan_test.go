package nodestep

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func TestDetectSwap(t *testing.T) {
	ds := func(name, image string, strategy appsv1.DaemonSetUpdateStrategyType, hostPort int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: name},
			Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: strategy},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image,
					Ports: []corev1.ContainerPort{{ContainerPort: 15020, HostPort: hostPort}}}}}}}}
	}
	for _, c := range []struct {
		name    string
		ds      *appsv1.DaemonSet
		want    model.SwapKind
		errHas  string
		whyHas  string
		oneLine bool
	}{
		{"ztunnel under OnDelete: surge", ds("ztunnel", "docker.io/istio/ztunnel:1.28.1", appsv1.OnDeleteDaemonSetStrategyType, 0), model.SwapSurge, "", "make-before-break", true},
		{"a ztunnel image under another name: surge", ds("zt", "registry:5000/istio/ztunnel:1.28.1", appsv1.OnDeleteDaemonSetStrategyType, 0), model.SwapSurge, "", "adopts", true},
		{"istio-cni: replace", ds("istio-cni-node", "docker.io/istio/install-cni:1.28.1", appsv1.OnDeleteDaemonSetStrategyType, 0), model.SwapReplace, "", "break-before-make", true},
		{"ztunnel with a host port: replace", ds("ztunnel", "docker.io/istio/ztunnel:1.28.1", appsv1.OnDeleteDaemonSetStrategyType, 15020), model.SwapReplace, "", "host port 15020", true},
		{"ztunnel under RollingUpdate: neither, say the chart value", ds("ztunnel", "docker.io/istio/ztunnel:1.28.1", appsv1.RollingUpdateDaemonSetStrategyType, 0), "",
			"set the ztunnel chart's value updateStrategy.type=OnDelete", "", true},
	} {
		got, why, err := DetectSwap(c.ds)
		if got != c.want || (c.errHas == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.errHas)) || !strings.Contains(why, c.whyHas) {
			t.Errorf("%s: %q %q %v; want %q, why with %q, error with %q", c.name, got, why, err, c.want, c.whyHas, c.errHas)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", c.name, err)
		}
	}
}

func TestForecastPerWorkload(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	yes := true
	pod := func(name, rs string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name),
			Labels:          map[string]string{"pod-template-hash": "abc12"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs, Controller: &yes}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: now.Add(-time.Hour)}}}
	}
	ages := func(pairs ...float64) []uint64 { // bucket index, count, ...
		a := make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
		for i := 0; i < len(pairs); i += 2 {
			a[int(pairs[i])] = uint64(pairs[i+1])
		}
		return a
	}
	// Buckets: 0:<1s 2:<5s 3:<9s 9:<45s 11:<120s.
	snap := wire.Snapshot{Time: now, StartTime: now.Add(-2 * time.Hour), Mode: wire.ModeEBPF, Pods: []wire.PodCounters{
		{UID: "cart-1", Namespace: "shop", Name: "cart-1", Side: wire.SideApp, ConnAges: ages(0, 100, 11, 3)},
		{UID: "cart-1", Namespace: "shop", Name: "cart-1", Side: wire.SideProxy, ConnAges: ages(11, 50)},
		{UID: "cart-2", Namespace: "shop", Name: "cart-2", Side: wire.SideApp, ConnAges: ages(0, 97)},
		{UID: "web-1", Namespace: "shop", Name: "web-1", Side: wire.SideApp, ConnAges: ages(0, 40, 2, 1)},
	}}
	in := ForecastInput{Node: "n1", Pods: []*corev1.Pod{pod("cart-1", "cart-abc12"), pod("cart-2", "cart-abc12"), pod("web-1", "web-abc12")},
		Snapshot: snap, Deadline: 25 * time.Second, LongLived: 5 * time.Second, Swap: model.SwapSurge}
	f := Forecast(in)
	if !f.Drain || len(f.Workloads) != 2 {
		t.Fatalf("forecast %+v; want drain and two workloads", f)
	}
	cart, web := f.Workloads[0], f.Workloads[1]
	if cart.Workload != "shop/cart" || cart.Pods != 2 || cart.Outlive != 3 || cart.P99Age != 120*time.Second {
		t.Errorf("cart: %+v; want 2 pods, 3 connections outliving (app side only), p99 ≤ 120s (3 of 200 are 60–120 s old)", cart)
	}
	if web.Workload != "shop/web" || web.Outlive != 0 || web.P99Age != 5*time.Second {
		t.Errorf("web: %+v; want nothing outliving, p99 ≤ 5s", web)
	}
	var out bytes.Buffer
	other := Forecast(ForecastInput{Node: "n2", AgentErr: errors.New("connection refused"), Pods: in.Pods, Deadline: 25 * time.Second, Swap: model.SwapSurge})
	if err := RenderForecast(&out, []NodeForecast{f, other}, 25*time.Second, 5*time.Second, model.SwapSurge); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"n1    shop/cart", "≤ 2m0s", "(agent unreachable)", "n2: drain (fail safe)",
		"drain auto would drain 2 of 2 node(s) (n1, n2)", "outlive the 25s deadline (p99 age): shop/cart (2m0s)", "maximum connection duration below 25s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("rendered forecast lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "shop/web (") {
		t.Errorf("shop/web listed as outliving the deadline:\n%s", out.String())
	}
}
