package skew

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/istio/inventory"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Version
		bad  bool
	}{
		{in: "1.27.3", want: Version{1, 27, 3}},
		{in: "v1.28.0", want: Version{1, 28, 0}},
		{in: "1.27.3-distroless", want: Version{1, 27, 3}},
		{in: "1-27", want: Version{1, 27, -1}},
		{in: "1.28", want: Version{1, 28, -1}},
		{in: "latest", bad: true},
		{in: "1.x.3", bad: true},
	} {
		got, err := ParseVersion(tc.in)
		if (err != nil) != tc.bad {
			t.Fatalf("ParseVersion(%q) err=%v, want bad=%v", tc.in, err, tc.bad)
		}
		if !tc.bad && got != tc.want {
			t.Errorf("ParseVersion(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	p := DefaultPolicy()
	obs := func(c Component, dp, cp string) Observation {
		return Observation{Component: c, Subject: "s", Revision: "r", Version: MustParse(dp), ControlPlane: MustParse(cp), HasControlPlane: true}
	}
	for _, tc := range []struct {
		name string
		o    Observation
		want string // substring of the reason, "" = no violation
	}{
		{"sidecar same minor", obs(Sidecar, "1.27.3", "1.27.1"), ""},
		{"sidecar one behind", obs(Sidecar, "1.27.3", "1.28.0"), ""},
		{"sidecar two behind", obs(Sidecar, "1.26.0", "1.28.0"), "2 minors behind"},
		{"sidecar newer than istiod", obs(Sidecar, "1.28.0", "1.27.3"), "newer than its control plane"},
		{"ztunnel one behind", obs(Ztunnel, "1.27.0", "1.28.0"), ""},
		{"ztunnel ahead", obs(Ztunnel, "1.28.0", "1.27.0"), "newer"},
		{"cni two behind", obs(CNI, "1.26.0", "1.28.0"), "2 minors behind"},
		{"stranded", Observation{Component: Sidecar, Subject: "s", Revision: "1-25", Version: MustParse("1.25.0")}, "no istiod serves"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Check(p, []Observation{tc.o})
			if tc.want == "" {
				if len(v) != 0 {
					t.Fatalf("want no violation, got %q", v[0].Reason)
				}
				return
			}
			if len(v) != 1 || !strings.Contains(v[0].Reason, tc.want) {
				t.Fatalf("want one violation containing %q, got %+v", tc.want, v)
			}
		})
	}
}

func TestOverride(t *testing.T) {
	p, err := DefaultPolicy().Override([]string{"sidecar=2"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := p.Supports(Sidecar, MustParse("1.26.0"), MustParse("1.28.0")); !ok {
		t.Fatalf("sidecar=2 should allow n-2: %s", why)
	}
	if ok, _ := DefaultPolicy().Supports(Sidecar, MustParse("1.26.0"), MustParse("1.28.0")); ok {
		t.Fatal("Override changed the default table")
	}
	for _, bad := range []string{"sidecar", "gateway=1", "sidecar=-1", "sidecar=two"} {
		if _, err := DefaultPolicy().Override([]string{bad}); err == nil {
			t.Errorf("Override(%q) accepted", bad)
		}
	}
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name         string
		policy       []string
		from, to     string
		want         []string // "from->to" per pass
		wantWhySkips bool
	}{
		{name: "n-1 to n is one pass", from: "1.27.3", to: "1.28.1", want: []string{"1.27->1.28"}},
		{name: "n-2 to n is two passes", from: "1.26.2", to: "1.28.1", want: []string{"1.26->1.27", "1.27->1.28"}, wantWhySkips: true},
		{name: "n-3 to n is three passes", from: "1.25.0", to: "1.28.0", want: []string{"1.25->1.26", "1.26->1.27", "1.27->1.28"}, wantWhySkips: true},
		{name: "wider policy: n-2 in one pass", policy: []string{"sidecar=2"}, from: "1.26.0", to: "1.28.0", want: []string{"1.26->1.28"}},
		{name: "patch only", from: "1.28.0", to: "1.28.2", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DefaultPolicy().Override(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			passes, err := Plan(p, MustParse(tc.from), MustParse(tc.to))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ps := range passes {
				got = append(got, ps.From.MinorString()+"->"+ps.To.MinorString())
				if tc.wantWhySkips && len(got) == 1 && !strings.Contains(ps.Why, "must reach") {
					t.Errorf("pass %s has no explanation of the split: %q", got[len(got)-1], ps.Why)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("passes %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := Plan(DefaultPolicy(), MustParse("1.28.0"), MustParse("1.27.0")); err == nil {
		t.Fatal("downgrade planned")
	}
}

func TestCheckControlPlaneMove(t *testing.T) {
	proxies := []Observation{
		{Component: Sidecar, Subject: "a/p1", Version: MustParse("1.27.3")},
		{Component: Sidecar, Subject: "b/p2", Version: MustParse("1.26.1")},
	}
	err := CheckControlPlaneMove(DefaultPolicy(), proxies, MustParse("1.28.0"))
	if err == nil || !strings.Contains(err.Error(), "b/p2") || !strings.Contains(err.Error(), "2 passes") {
		t.Fatalf("want refusal naming b/p2 and 2 passes, got %v", err)
	}
	if err := CheckControlPlaneMove(DefaultPolicy(), proxies[:1], MustParse("1.28.0")); err != nil {
		t.Fatalf("1.27 proxies under 1.28 refused: %v", err)
	}
}

// TestWaypointSkew: a waypoint is checked against its own revision's
// istiod, and counts as the oldest proxy a plan starts from.
func TestWaypointSkew(t *testing.T) {
	inv := inventory.Inventory{
		Revisions: []inventory.Revision{{Name: "1-26", Version: "1.26.2"}, {Name: "1-28", Version: "1.28.0"}},
		Waypoints: []inventory.Waypoint{{Namespace: "shop", Name: "waypoint", Revision: "1-28", Version: "1.26.2"}, {Namespace: "pay", Name: "waypoint", Revision: "1-26", Version: "1.26.2"}},
		Pods:      []inventory.Pod{{Namespace: "a", Name: "p", Mode: inventory.ModeSidecar, Revision: "1-28", Version: "1.28.0"}},
	}
	obs, err := FromInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	v := Check(DefaultPolicy(), obs)
	if len(v) != 1 || v[0].Component != Waypoint || v[0].Subject != "shop/waypoint" || !strings.Contains(v[0].Reason, "2 minors behind") {
		t.Fatalf("violations %+v, want waypoint shop/waypoint 2 minors behind 1.28", v)
	}
	if oldest, ok := OldestProxy(inv); !ok || oldest != MustParse("1.26.2") {
		t.Fatalf("oldest proxy %v (%v), want the waypoints' 1.26.2", oldest, ok)
	}
}

func TestWaypointCanarySupport(t *testing.T) {
	nodes := func(versions ...string) inventory.Inventory {
		var inv inventory.Inventory
		for i, v := range versions {
			inv.Nodes = append(inv.Nodes, inventory.Node{Name: fmt.Sprintf("n%d", i), Ztunnel: v})
		}
		return inv
	}
	for name, tc := range map[string]struct {
		inv  inventory.Inventory
		to   string
		ok   bool
		want string
	}{
		"all 1.31+":         {nodes("1.31.0", "1.32.1", ""), "1.32.0", true, "all 2 ztunnels at 1.31 or later"},
		"istiod 1.30":       {nodes("1.31.0"), "1.30.2", false, "istiod 1.30.2 predates"},
		"one old ztunnel":   {nodes("1.31.0", "1.30.4"), "1.31.0", false, `ztunnel on n1 runs "1.30.4"`},
		"unreadable":        {nodes("latest"), "1.31.0", false, `ztunnel on n0 runs "latest"`},
		"no ztunnel":        {nodes(""), "1.31.0", false, "no ztunnel seen"},
		"release candidate": {nodes("1.31.0-rc.1"), "1.31.0-rc.1", true, "all 1 ztunnels"},
	} {
		ok, why := WaypointCanary(tc.inv, MustParse(tc.to))
		if ok != tc.ok || !strings.Contains(why, tc.want) {
			t.Errorf("%s: %t %q, want %t with %q", name, ok, why, tc.ok, tc.want)
		}
	}
}
