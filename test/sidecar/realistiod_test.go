package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestRealIstiodMigration moves a sidecar namespace between two revisions
// of the real istiod (pilot-discovery, from Istio's charts as the built
// istioctl renders them; only its pods are simulated): the namespace is on
// tag prod, a webhook istiod 1-28's own chart made, and its pods are
// injected by istiod 1-28 (its injection counter, its status annotation,
// its proxy image). istiod keeps the caBundle of its tag webhook. A
// RevisionMigration to 1-29 with stableTag prod retags the namespace
// through canary, restarts it, and hands prod over to 1-29: the pods come
// back Ready, injected by istiod 1-29 on its proxy image, and istiod's tag
// webhook, like the canary tag nodewise created, now calls 1-29. The inventory reads both revisions' versions and
// the pods' revisions before and after.
func TestRealIstiodMigration(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := cluster.Start(t, cluster.Options{Nodes: 3, Zones: 3})
	old := startIstiod(t, c, cluster.IstiodOptions{Version: "1.28.1", Tags: []string{"prod"}})
	next := startIstiod(t, c, cluster.IstiodOptions{Version: "1.29.0"})
	cluster.InstallCRDs(t, c, testkit.CRD(testkit.RevisionMigrationsCRD))
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, c: c, mc: nwc.RevisionMigrations()}
	cs := c.Client

	// istiod keeps its tag webhook's caBundle: a wrong one is patched back.
	// tagWebhook returns the tag's revision, and the URL and caBundle of
	// its webhooks when all agree (else what differs).
	tagWebhook := func() (url, rev string, ca []byte) {
		wh, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, revtag.WebhookName("prod"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range wh.Webhooks {
			if h.ClientConfig.URL == nil {
				t.Fatalf("tag prod's webhook %s has no URL: %+v", h.Name, h.ClientConfig)
			}
			if i > 0 && (*h.ClientConfig.URL != url || !bytes.Equal(h.ClientConfig.CABundle, ca)) {
				return "webhooks differ", wh.Labels["istio.io/rev"], nil
			}
			url, ca = *h.ClientConfig.URL, h.ClientConfig.CABundle
		}
		return url, wh.Labels["istio.io/rev"], ca
	}
	if url, rev, ca := tagWebhook(); url != old.InjectURL || rev != "1-28" || !bytes.Equal(ca, old.CABundle) {
		t.Fatalf("istiod 1-28's chart made tag prod -> %s at %s (its CA: %t), want 1-28 at %s", rev, url, bytes.Equal(ca, old.CABundle), old.InjectURL)
	}
	wrong := base64JSON(c.Config.CAData)
	// The patch's answer shows the spoiled CA written; istiod may put its own
	// back before any later read.
	spoiled, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, revtag.WebhookName("prod"), types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":`+wrong+`}]`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(spoiled.Webhooks[0].ClientConfig.CABundle, c.Config.CAData) {
		t.Fatal("the spoiled caBundle did not take")
	}
	testkit.WaitFor(t, 30*time.Second, "istiod 1-28 to patch its CA back into tag prod", func() (bool, error) {
		url, _, ca := tagWebhook()
		return bytes.Equal(ca, old.CABundle), fmt.Errorf("%s, caBundle of %d bytes", url, len(ca))
	})

	// Injection by istiod 1-28 through its tag.
	e.namespace("shop", map[string]string{"istio.io/rev": "prod"}, app{name: "web", replicas: 2})
	injectedBy(t, e, "shop", old, 2)
	// istiod publishes the mesh root in the namespace (no fixture does here).
	testkit.WaitFor(t, 30*time.Second, "istiod's istio-ca-root-cert in shop", func() (bool, error) {
		_, err := cs.CoreV1().ConfigMaps("shop").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		return err == nil, err
	})
	if n := injections(t, next); n != 0 {
		t.Fatalf("istiod 1-29 injected %v pods before any namespace used it", n)
	}
	inv, err := inventory.Observe(ctx, cs, inventory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := inv.RevisionVersion("prod"); v != "1.28.1" {
		t.Errorf("inventory: tag prod serves %q, want 1.28.1", v)
	}
	if v, _ := inv.RevisionVersion("1-29"); v != "1.29.0" {
		t.Errorf("inventory: revision 1-29 serves %q, want 1.29.0", v)
	}
	if n := inv.Counts()[inventory.Key{Namespace: "shop", Revision: "1-28", Version: "1.28.1", Mode: inventory.ModeSidecar}]; n != 2 {
		t.Errorf("inventory: %d shop proxies on 1-28/1.28.1, want 2 (%v)", n, inv.Counts())
	}
	// The real istioctl sees istiod's tag with its namespace.
	if rows := tagRows(runIstioctl(t, c.Kubeconfig, "tag", "list")); rows["prod"] != "1-28 shop" {
		t.Errorf("istioctl tag list: prod is %q, want \"1-28 shop\"", rows["prod"])
	}

	// The migration, judged by readiness.
	e.controller(nil)
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "to-1-29"}, Spec: v1alpha1.RevisionMigrationSpec{
		From: "1-28", To: "1-29", StableTag: "prod", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm := e.waitPhase("to-1-29", 2*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationHalted, v1alpha1.MigrationRefused)
	if rm.Status.Phase != v1alpha1.MigrationSucceeded {
		t.Fatalf("migration ended %s: %s", rm.Status.Phase, rm.Status.Reason)
	}
	for _, ns := range rm.Status.Namespaces {
		if ns.Name == "shop" && ns.Phase != v1alpha1.NamespaceReady {
			t.Errorf("namespace shop ended %s: %s", ns.Phase, ns.Message)
		}
	}
	e.waitCondition("to-1-29", revisions.ConditionTagHandedOver, metav1.ConditionTrue)
	injectedBy(t, e, "shop", next, 2)
	if url, rev, ca := tagWebhook(); url != next.InjectURL || rev != "1-29" || !bytes.Equal(ca, next.CABundle) {
		t.Errorf("after the handover tag prod -> %s at %s (CA of 1-29: %t), want 1-29 at %s", rev, url, bytes.Equal(ca, next.CABundle), next.InjectURL)
	}
	// The canary tag nodewise created calls 1-29 as its own webhook does.
	canary, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, revtag.WebhookName("canary"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range canary.Webhooks {
		if h.ClientConfig.URL == nil || *h.ClientConfig.URL != next.InjectURL || !bytes.Equal(h.ClientConfig.CABundle, next.CABundle) {
			t.Errorf("nodewise's tag canary, webhook %s: %+v, want istiod 1-29's URL %s and CA", h.Name, h.ClientConfig, next.InjectURL)
		}
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels["istio.io/rev"] != "prod" {
		t.Errorf("shop labelled istio.io/rev=%s after the handover, want prod", ns.Labels["istio.io/rev"])
	}
	inv, err = inventory.Observe(ctx, cs, inventory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := inv.RevisionVersion("prod"); v != "1.29.0" {
		t.Errorf("inventory after the handover: tag prod serves %q, want 1.29.0", v)
	}
	if n := inv.Counts()[inventory.Key{Namespace: "shop", Revision: "1-29", Version: "1.29.0", Mode: inventory.ModeSidecar}]; n != 2 {
		t.Errorf("inventory after the migration: %d shop proxies on 1-29/1.29.0, want 2 (%v)", n, inv.Counts())
	}
	for _, i := range []*cluster.Istiod{old, next} {
		rss, err := i.RSS()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("FIGURE: istiod %s: ready %s after its start, RSS %.0f MiB at the end", i.Revision, i.StartUp.Round(10*time.Millisecond), float64(rss)/(1<<20))
	}
}

// startIstiod starts a revision of the real istiod on c.
func startIstiod(t *testing.T, c *cluster.Cluster, opts cluster.IstiodOptions) *cluster.Istiod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	i, err := c.StartIstiod(ctx, opts)
	if err != nil {
		t.Fatalf("starting istiod %s: %v", opts.Version, err)
	}
	t.Cleanup(i.Stop)
	return i
}

// injectedBy waits until the namespace has want Ready pods, every one
// injected by istiod i: its istio-proxy on i's proxy image and its
// sidecar.istio.io/status naming i's revision. It then checks that i's
// webhook counted at least want injections.
func injectedBy(t *testing.T, e *env, ns string, i *cluster.Istiod, want int) {
	t.Helper()
	image := "docker.io/istio/proxyv2:" + i.Version
	testkit.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d pods of %s injected by istiod %s", want, ns, i.Revision), func() (bool, error) {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if !podutils.IsPodReady(&p) {
				return false, fmt.Errorf("%s not Ready", p.Name)
			}
			if got := proxyImage(p); got != image {
				return false, fmt.Errorf("%s runs proxy %q, want %s", p.Name, got, image)
			}
			var st struct {
				Containers, InitContainers []string
				Revision                   string
			}
			if err := json.Unmarshal([]byte(p.Annotations["sidecar.istio.io/status"]), &st); err != nil {
				return false, fmt.Errorf("%s: sidecar.istio.io/status %q: %v", p.Name, p.Annotations["sidecar.istio.io/status"], err)
			}
			if st.Revision != i.Revision || !strings.Contains(strings.Join(append(st.Containers, st.InitContainers...), ","), "istio-proxy") {
				return false, fmt.Errorf("%s: sidecar.istio.io/status %+v, want revision %s with istio-proxy", p.Name, st, i.Revision)
			}
			ready++
		}
		return ready == want, fmt.Errorf("%d pods Ready, want %d", ready, want)
	})
	if n := injections(t, i); n < float64(want) {
		t.Fatalf("istiod %s counted %v injections, want at least %d", i.Revision, n, want)
	}
}

// proxyImage is the image of a pod's istio-proxy, a native sidecar (an init
// container) or a container.
func proxyImage(p corev1.Pod) string {
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == "istio-proxy" {
			return c.Image
		}
	}
	return ""
}

// injections is istiod's sidecar_injection_success_total, from its
// monitoring port.
func injections(t *testing.T, i *cluster.Istiod) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", i.MonitoringPort))
	if err != nil {
		t.Fatalf("reading istiod %s's metrics: %v", i.Revision, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && (f[0] == "sidecar_injection_success_total" || strings.HasPrefix(f[0], "sidecar_injection_success_total{")) {
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("istiod metric line %q: %v", sc.Text(), err)
			}
			sum += v
		}
	}
	return sum
}

// base64JSON is data as a JSON string of its base64, a []byte field's form.
func base64JSON(data []byte) string {
	b, _ := json.Marshal(data)
	return string(b)
}
