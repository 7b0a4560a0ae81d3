package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/test/netrig"
)

// meshFake is a MeshSource with fixed answers.
type meshFake struct {
	pods []MeshPod
	zt   Ztunnels
}

func (m meshFake) AmbientPods() ([]MeshPod, error) { return m.pods, nil }
func (m meshFake) Ztunnels() (Ztunnels, error)     { return m.zt, nil }

// istioRules is istio-cni's in-pod layout of its nftables backend (Istio
// 1.27+): outbound connections to port 8080 go to 15001, inbound ones on
// eth0 to 15006; ztunnel's own (mark 1337) pass.
const istioRules = `table inet istio-proxy-nat {
	chain istio-redirect { meta l4proto tcp redirect to :15001; }
	chain istio-in-redirect { meta l4proto tcp redirect to :15006; }
	chain output {
		type nat hook output priority -100; policy accept;
		meta mark 1337 return
		tcp dport 8080 jump istio-redirect
	}
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		iifname "eth0" tcp dport 8080 jump istio-in-redirect
	}
}
`

func installRules(t *testing.T, ns, rules string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", ns, err, out)
	}
}

func meshPod(p *netrig.Pod) MeshPod {
	return MeshPod{Pod: Pod{Namespace: "rig", Name: p.PodName, UID: p.Name}, Netns: "/run/netns/" + p.Name}
}

// TestEnrollmentChecksOnTheKernel runs each check against real network
// namespaces: istio-cni's rules read with netlink, ztunnel's listeners
// matched to the ztunnel process by socket inode, and a held connection that
// skips ztunnel caught in the socket table.
func TestEnrollmentChecksOnTheKernel(t *testing.T) {
	r := netrig.New(t)
	enrolled, norules, nolisten, oldgen, bypass, peer := r.AddPod("enrolled"), r.AddPod("norules"), r.AddPod("nolisten"), r.AddPod("oldgen"), r.AddPod("bypass"), r.AddPod("peer")
	for _, p := range []*netrig.Pod{enrolled, nolisten, oldgen, bypass} {
		installRules(t, p.Name, istioRules)
	}
	for _, p := range []*netrig.Pod{enrolled, norules, oldgen, bypass} {
		p.StartStandin()
	}
	peer.StartApp("")
	peer.ListenEcho(t, 9090, false)
	// A redirected connection (to the peer's 8080, through the stand-in's
	// 15001) in the enrolled pod and in the bypassing one; a straight one
	// (to 9090, which the rules leave alone) in the bypassing one only.
	for _, p := range []*netrig.Pod{enrolled, bypass} {
		closeAll, err := p.Hold(fmt.Sprintf("%s:%d", peer.IP, netrig.AppPort), 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeAll)
	}
	closeAll, err := bypass.Hold(fmt.Sprintf("%s:9090", peer.IP), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	// A connection of the enrolled pod to its own address (as ztunnel's
	// inbound delivery to the app is) never leaves the pod: not a bypass.
	enrolled.ListenEcho(t, 9090, false)
	closeSelf, err := enrolled.Hold(fmt.Sprintf("%s:9090", enrolled.IP), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeSelf)

	for _, c := range []struct {
		pod      *netrig.Pod
		zt       Ztunnels
		result   wire.EnrollmentResult
		failed   wire.EnrollmentCheck
		inDetail string
	}{
		{enrolled, Ztunnels{Current: enrolled.StandinPID()}, wire.Enrolled, "", ""},
		{norules, Ztunnels{Current: norules.StandinPID()}, wire.NotEnrolled, wire.CheckRedirection, "no istio-cni rules"},
		{nolisten, Ztunnels{Current: enrolled.StandinPID()}, wire.NotEnrolled, wire.CheckListeners, "nothing listens on 15001, nothing listens on 15006, nothing listens on 15008"},
		{oldgen, Ztunnels{Current: enrolled.StandinPID(), Older: []int{oldgen.StandinPID()}}, wire.NotEnrolled, wire.CheckListeners, "only an older ztunnel listens on 15001"},
		{nolisten, Ztunnels{}, wire.NotEnrolled, wire.CheckListeners, "no ztunnel runs on the node"},
		{bypass, Ztunnels{Current: bypass.StandinPID()}, wire.NotEnrolled, wire.CheckBypass, fmt.Sprintf("1 open connections go straight to their peer, not through ztunnel's outbound listener (first %s:", bypass.IP)},
	} {
		e := CheckEnrollment(meshFake{pods: []MeshPod{meshPod(c.pod)}, zt: c.zt}, "/proc", time.Now())
		if e.Error != "" || len(e.Pods) != 1 {
			t.Fatalf("%s: enrollment %+v", c.pod.PodName, e)
		}
		got := e.Pods[0]
		if got.Result != c.result || got.Failed != c.failed || !strings.Contains(got.Detail, c.inDetail) {
			t.Errorf("%s: got %s, want %s %s with %q", c.pod.PodName, got, c.result, c.failed, c.inDetail)
		}
	}

	gone := MeshPod{Pod: Pod{Namespace: "rig", Name: "gone", UID: "x"}, NoNetns: "no process of the pod runs"}
	e := CheckEnrollment(meshFake{pods: []MeshPod{gone}, zt: Ztunnels{Current: enrolled.StandinPID()}}, "/proc", time.Now())
	if p := e.Pods[0]; p.Result != wire.NotCheckable || !strings.Contains(p.Detail, "no process of the pod runs") {
		t.Errorf("a pod without a namespace: %s, want not checkable with the reason", p)
	}
}

// TestBypassing: which of a namespace's sockets are outbound connections
// that skip ztunnel, with the conntrack lookup a connection not matched by
// its port gets.
func TestBypassing(t *testing.T) {
	ap := netip.MustParseAddrPort
	sock := func(state uint8, local, remote string, inode uint64) tcpSock {
		return tcpSock{local: ap(local), remote: ap(remote), state: state, inode: inode}
	}
	// The pod 10.0.0.4 runs ztunnel's listeners (inodes 1-3) and an app
	// server on 8080; 7 is ztunnel's upstream socket.
	base := []tcpSock{
		sock(tcpListen, "0.0.0.0:15001", "0.0.0.0:0", 1), sock(tcpListen, "0.0.0.0:15006", "0.0.0.0:0", 2),
		sock(tcpListen, "0.0.0.0:15008", "0.0.0.0:0", 3), sock(tcpListen, "0.0.0.0:8080", "0.0.0.0:0", 4),
	}
	zt := map[uint64]bool{1: true, 2: true, 3: true, 7: true}
	redirected := func(local string) ctTuple { return ctTuple{src: ap("127.0.0.1:15001"), dst: ap(local)} }
	direct := ctTuple{src: ap("10.0.1.9:8080"), dst: ap("10.0.0.4:40000")}
	for _, c := range []struct {
		name  string
		socks []tcpSock
		ct    map[string]ctTuple // app's local → reply tuple; absent: no entry
		ctErr error
		want  []string
	}{
		{name: "redirected: ztunnel accepted it from the app's port", socks: []tcpSock{
			sock(tcpEstablished, "10.0.0.4:40000", "10.0.1.9:8080", 9), sock(tcpEstablished, "127.0.0.1:15001", "10.0.0.4:40000", 8),
			sock(tcpEstablished, "10.0.0.4:40002", "10.0.1.9:8080", 7)}},
		{name: "redirected: NAT moved it to another port, conntrack names it", socks: []tcpSock{
			sock(tcpEstablished, "10.0.0.4:40000", "10.0.1.9:8080", 9), sock(tcpEstablished, "127.0.0.1:15001", "10.0.0.4:51234", 8)},
			ct: map[string]ctTuple{"10.0.0.4:40000": redirected("10.0.0.4:51234")}},
		{name: "redirected to another port than ztunnel accepted", socks: []tcpSock{
			sock(tcpEstablished, "10.0.0.4:40000", "10.0.1.9:8080", 9), sock(tcpEstablished, "127.0.0.1:15001", "10.0.0.4:51234", 8)},
			ct:   map[string]ctTuple{"10.0.0.4:40000": redirected("10.0.0.4:60000")},
			want: []string{"10.0.0.4:40000 → 10.0.1.9:8080"}},
		{name: "straight to the peer: conntrack has no NAT", socks: []tcpSock{sock(tcpEstablished, "10.0.0.4:40000", "10.0.1.9:8080", 9)},
			ct: map[string]ctTuple{"10.0.0.4:40000": direct}, want: []string{"10.0.0.4:40000 → 10.0.1.9:8080"}},
		{name: "straight to the peer: no conntrack entry", socks: []tcpSock{sock(tcpEstablished, "10.0.0.4:40000", "10.0.1.9:8080", 9)},
			want: []string{"10.0.0.4:40000 → 10.0.1.9:8080"}},
		{name: "not ours to judge", socks: []tcpSock{
			sock(tcpEstablished, "10.0.0.4:8080", "10.0.1.9:33000", 10),   // accepted by the app
			sock(tcpEstablished, "10.0.0.4:41000", "127.0.0.1:9000", 11),  // loopback
			sock(tcpEstablished, "10.0.0.4:41002", "10.0.0.4:8080", 12),   // the pod itself
			sock(tcpEstablished, "10.0.0.4:41004", "10.0.1.9:15008", 13),  // to a ztunnel port
			sock(tcpEstablished, "10.0.0.4:41006", "10.0.1.9:8080", 7),    // ztunnel's own
			sock(6 /* TIME_WAIT */, "10.0.0.4:41008", "10.0.1.9:8080", 0), // not open
		}},
		{name: "conntrack cannot be read", socks: []tcpSock{sock(tcpEstablished, "10.0.0.4:40000", "10.0.1.9:8080", 9)},
			ctErr: syscall.EPERM},
	} {
		nat := func(local, remote netip.AddrPort) (ctTuple, error) {
			if c.ctErr != nil {
				return ctTuple{}, c.ctErr
			}
			if tu, ok := c.ct[local.String()]; ok {
				return tu, nil
			}
			return ctTuple{}, errNoConntrack
		}
		got, err := bypassing(append(append([]tcpSock(nil), base...), c.socks...), zt, nat)
		if c.ctErr != nil {
			if !errors.Is(err, c.ctErr) {
				t.Errorf("%s: error %v, want %v", c.name, err, c.ctErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v (%v), want %v", c.name, got, err, c.want)
		}
	}
}

// TestEnrollmentSeesThroughNATsPortChoice: a pod's redirected connection
// from a local port that an earlier one to another peer used (the kernel
// shares a local port across peers) has the reply tuple that earlier
// connection's conntrack entry still holds after the redirect (15001 → the
// pod's address and that port), so NAT gives it another source port, and
// ztunnel accepts it from that port. Matched by port alone it looked like a
// connection straight to its peer (what failed healthy live rollouts now
// and then); the check finds it redirected in the namespace's conntrack
// table, and the pod enrolled.
func TestEnrollmentSeesThroughNATsPortChoice(t *testing.T) {
	r := netrig.New(t)
	pod := r.AddPod("shared-port")
	installRules(t, pod.Name, istioRules)
	pod.StartStandin()
	local := &net.TCPAddr{IP: pod.IP, Port: 40000}
	d := net.Dialer{LocalAddr: local, Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
		return errors.Join(err, serr)
	}}
	var held net.Conn
	err := pod.Do(func() error {
		// Both peers' connections are redirected before they leave the pod.
		first, err := d.DialContext(context.Background(), "tcp4", "10.77.0.200:8080")
		if err != nil {
			return err
		}
		// Aborted: the socket goes at once, its conntrack entry stays (10 s).
		_ = first.(*net.TCPConn).SetLinger(0)
		first.Close()
		held, err = d.DialContext(context.Background(), "tcp4", "10.77.0.201:8080")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	fd, err := unix.Open("/run/netns/"+pod.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	socks, err := readSockets(fd)
	if err != nil {
		t.Fatal(err)
	}
	var accepted []string
	for _, s := range socks {
		if s.state == tcpEstablished && s.local.Port() == ztunnelOutbound {
			accepted = append(accepted, s.remote.String())
		}
	}
	// The kernel's choice this test is about: ztunnel accepts the held
	// connection from a port NAT picked, not from 40000.
	if len(accepted) != 1 || accepted[0] == local.String() {
		t.Fatalf("ztunnel accepted the connection from %v, want one from another port than %s", accepted, local)
	}
	if byPort, _ := bypassing(socks, nil, nil); len(byPort) != 1 {
		t.Errorf("matched by port alone: %v, want the connection NAT moved", byPort)
	}
	e := CheckEnrollment(meshFake{pods: []MeshPod{meshPod(pod)}, zt: Ztunnels{Current: pod.StandinPID()}}, "/proc", time.Now())
	if len(e.Pods) != 1 || e.Pods[0].Result != wire.Enrolled {
		t.Errorf("enrollment %+v: want the pod enrolled, its connection through ztunnel", e.Pods)
	}
}

// TestSnapshotCarriesEnrollment: with a mesh source, every snapshot holds
// the enrollment and the gauge counts the results.
func TestSnapshotCarriesEnrollment(t *testing.T) {
	r := netrig.New(t)
	in, out := r.AddPod("in"), r.AddPod("out")
	installRules(t, in.Name, istioRules)
	in.StartStandin()
	mesh := meshFake{pods: []MeshPod{meshPod(in), meshPod(out)}, zt: Ztunnels{Current: in.StandinPID()}}
	ra := startAgent(t, ModeProc, NewStaticResolver(nil), func(c *Config) { c.Mesh = mesh })
	s, err := ra.Agent.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if n, total := s.Enrollment.Count(); n != 1 || total != 2 || s.Enrollment.Ztunnel != fmt.Sprintf("pid %d", in.StandinPID()) {
		t.Fatalf("enrollment %+v: want 1 of 2 enrolled, matched against pid %d", s.Enrollment, in.StandinPID())
	}
	_, raw := ra.get(t, "/metrics", ra.files.tokenValue)
	body := string(raw)
	for _, want := range []string{`nodewise_agent_enrollment_pods{result="enrolled"} 1`, `nodewise_agent_enrollment_pods{result="not-enrolled"} 1`, `nodewise_agent_enrollment_pods{result="not-checkable"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
