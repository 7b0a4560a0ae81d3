package nodeagent

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/test/netrig"
)

// istioIptables is istio-cni's in-pod layout of its iptables backend, in
// iptables-restore's format: outbound connections to 8080 go to 15001,
// inbound ones to 15006.
const istioIptables = `*nat
:ISTIO_OUTPUT - [0:0]
:ISTIO_PRERT - [0:0]
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A PREROUTING -p tcp -j ISTIO_PRERT
-A ISTIO_OUTPUT -p tcp --dport 8080 -j REDIRECT --to-ports 15001
-A ISTIO_PRERT -p tcp --dport 8080 -j REDIRECT --to-ports 15006
COMMIT
`

// iptablesIn runs an iptables binary (iptables-nft-restore, ...) in a
// named network namespace with stdin.
func iptablesIn(t *testing.T, ns, stdin, bin string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("%v (Debian: apt-get install iptables)", err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s in %s: %v: %s", bin, ns, err, out)
	}
}

// TestEnrollmentIptablesBackends holds the check against istio-cni's
// iptables backend on the kernel: its rules as iptables-nft writes them are
// read (REDIRECT ports decoded) and the pod is enrolled; as iptables-legacy
// writes them (a host whose iptables is the legacy one) nftables netlink
// cannot see them and the pod is not checkable, "cannot check", never not
// enrolled; legacy tables only listed (iptables-legacy run in the namespace
// to list them, as istio-cni's backend detection does), with no rule of
// their own, leave a pod without rules not enrolled.
func TestEnrollmentIptablesBackends(t *testing.T) {
	r := netrig.New(t)
	nft, legacy, listed := r.AddPod("ipt-nft"), r.AddPod("ipt-legacy"), r.AddPod("ipt-listed")
	for _, p := range []*netrig.Pod{nft, legacy, listed} {
		p.StartStandin()
	}
	iptablesIn(t, nft.Name, istioIptables, "iptables-nft-restore")
	iptablesIn(t, legacy.Name, istioIptables, "iptables-legacy-restore")
	iptablesIn(t, listed.Name, "", "iptables-legacy", "-t", "nat", "-S")
	for _, c := range []struct {
		pod      *netrig.Pod
		result   wire.EnrollmentResult
		failed   wire.EnrollmentCheck
		inDetail string
	}{
		{nft, wire.Enrolled, "", ""},
		{legacy, wire.NotCheckable, "", "cannot check its redirection: its netns holds legacy iptables tables (ip:nat)"},
		{listed, wire.NotEnrolled, wire.CheckRedirection, "no istio-cni rules"},
	} {
		e := CheckEnrollment(meshFake{pods: []MeshPod{meshPod(c.pod)}, zt: Ztunnels{Current: c.pod.StandinPID()}}, "/proc", time.Now())
		if e.Error != "" || len(e.Pods) != 1 {
			t.Fatalf("%s: enrollment %+v", c.pod.PodName, e)
		}
		if got := e.Pods[0]; got.Result != c.result || got.Failed != c.failed || !strings.Contains(got.Detail, c.inDetail) {
			t.Errorf("%s: got %s, want %s %s with %q", c.pod.PodName, got, c.result, c.failed, c.inDetail)
		}
	}
}

// istioAmbientRules is the in-pod layout of the istio-cni tools/istioctl
// pins, as its log printed it on sim/cluster's real node (trimmed): tables
// inet istio-ambient-*, not istio-proxy-*.
const istioAmbientRules = `table inet istio-ambient-nat {
	chain prerouting { type nat hook prerouting priority -100; policy accept; jump istio-prerouting; }
	chain output { type nat hook output priority -100; policy accept; jump istio-output; }
	chain istio-prerouting {
		ip daddr != 127.0.0.1/32 tcp dport != 15008 meta mark & 0xfff != 0x539 counter redirect to :15006
	}
	chain istio-output {
		meta l4proto tcp ip daddr != 127.0.0.1/32 meta mark & 0xfff != 0x539 counter redirect to :15001
	}
}
`

// TestEnrollmentReadsIstioAmbientTables: the real istio-cni's nftables
// backend names its in-pod tables inet istio-ambient-*; a pod with them is
// enrolled, not "no istio-cni rules".
func TestEnrollmentReadsIstioAmbientTables(t *testing.T) {
	r := netrig.New(t)
	p := r.AddPod("ambient-tables")
	p.StartStandin()
	installRules(t, p.Name, istioAmbientRules)
	e := CheckEnrollment(meshFake{pods: []MeshPod{meshPod(p)}, zt: Ztunnels{Current: p.StandinPID()}}, "/proc", time.Now())
	if e.Error != "" || len(e.Pods) != 1 || e.Pods[0].Result != wire.Enrolled {
		t.Fatalf("a pod with istio-cni's istio-ambient-* tables: %+v, want enrolled", e)
	}
}
