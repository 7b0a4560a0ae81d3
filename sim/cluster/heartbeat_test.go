package cluster

import (
	"slices"
	"testing"
	"time"
)

// TestFleetHeartbeatBoundsTheRenewalRate checks the default Lease renewal
// period: a kubelet's 10 s for small clusters, and for large fleets a period
// that keeps all renewals together at HeartbeatsPerSecond.
func TestFleetHeartbeatBoundsTheRenewalRate(t *testing.T) {
	for _, tc := range []struct {
		nodes int
		want  time.Duration
	}{
		{1, 10 * time.Second},
		{200, 10 * time.Second},
		{201, 10050 * time.Millisecond},
		{1000, 50 * time.Second},
		{5000, 250 * time.Second},
		{maxNodes, 832 * time.Second},
	} {
		got := FleetHeartbeat(tc.nodes)
		if got != tc.want {
			t.Errorf("FleetHeartbeat(%d) = %s, want %s", tc.nodes, got, tc.want)
		}
		if rate := float64(tc.nodes) / got.Seconds(); rate > HeartbeatsPerSecond+1e-9 {
			t.Errorf("%d nodes renewing every %s: %.1f renewals/s, more than %d", tc.nodes, got, rate, HeartbeatsPerSecond)
		}
	}
	o := Options{Nodes: 5000}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Heartbeat != 250*time.Second {
		t.Errorf("Options{Nodes: 5000}.Validate() set Heartbeat %s, want 250s", o.Heartbeat)
	}
	o = Options{Nodes: 5000, Heartbeat: 10 * time.Second}
	if err := o.Validate(); err != nil || o.Heartbeat != 10*time.Second {
		t.Errorf("an explicit Heartbeat of 10s became %s (%v)", o.Heartbeat, err)
	}
}

// TestLifecycleFlagsFollowTheHeartbeat checks that kube-controller-manager's
// node-lifecycle periods keep the upstream ratios to a longer renewal period,
// and that a kubelet's 10 s keeps the upstream defaults.
func TestLifecycleFlagsFollowTheHeartbeat(t *testing.T) {
	if got := lifecycleFlags(10 * time.Second); got != nil {
		t.Errorf("lifecycleFlags(10s) = %v, want none (the upstream defaults)", got)
	}
	want := []string{
		"--node-monitor-grace-period=20m50s",
		"--node-startup-grace-period=25m0s",
		"--node-monitor-period=2m5s",
	}
	if got := lifecycleFlags(250 * time.Second); !slices.Equal(got, want) {
		t.Errorf("lifecycleFlags(250s) = %v, want %v", got, want)
	}
	s := &state{Dir: t.TempDir(), Options: Options{Nodes: 1000}}
	if err := s.Options.Validate(); err != nil {
		t.Fatal(err)
	}
	argv := s.controllerManagerArgv(binaries{ControllerManager: "kcm"})
	if !slices.Contains(argv, "--node-monitor-grace-period=4m10s") {
		t.Errorf("kube-controller-manager of a 1,000-node cluster (renewals every %s) runs with %v, want --node-monitor-grace-period=4m10s", s.Options.Heartbeat, argv)
	}
}
