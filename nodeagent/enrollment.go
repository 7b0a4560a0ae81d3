package nodeagent

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/health/wire"
)

// ztunnel's in-pod ports: outbound (redirected connects), inbound
// plaintext (redirected accepts) and HBONE.
const (
	ztunnelOutbound = 15001
	ztunnelInbound  = 15006
	ztunnelHBONE    = 15008
)

// MeshPod is one pod on the node that Istio puts in the ambient mesh
// (istio.Ambient: namespace or pod label, not a waypoint, not opted out).
type MeshPod struct {
	Pod
	// Netns is the path of a file that is the pod's network namespace:
	// /proc/<pid>/ns/net of one of its processes, or a bind mount such as
	// /run/netns/<name>. Empty: it was not found, and NoNetns says why.
	Netns   string
	NoNetns string
}

// Ztunnels are the ztunnel processes running on the node.
type Ztunnels struct {
	// Current is the PID of the ztunnel that serves the node now (the
	// newest, the one istio-cni hands pods to); 0 when none runs.
	Current int
	// Older are the PIDs of older ztunnels still running (draining).
	Older []int
	// procs, when the source knows them (KubeMesh), say which process each
	// PID was when it was found: its sockets are read only while that
	// process still holds the PID.
	procs map[int]procID
}

// sockets reads the inodes of the sockets ztunnel pid holds, through its
// /proc directory, once that is checked to be the process found.
func (z Ztunnels) sockets(procRoot string, pid int) (map[uint64]bool, error) {
	d, err := openProcDir(procRoot, pid)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if id, ok := z.procs[pid]; ok {
		if err := d.is(id); err != nil {
			return nil, err
		}
	}
	return d.socketInodes()
}

// MeshSource tells the enrollment check which pods to look at and which
// ztunnel runs. The simulated data plane supplies one
// (sim/dataplane.DataPlane.Mesh).
type MeshSource interface {
	AmbientPods() ([]MeshPod, error)
	Ztunnels() (Ztunnels, error)
}

// CheckEnrollment checks every ambient pod of the node (what the agent puts
// in each snapshot when Config.Mesh is set): the redirection in
// its namespace, the current ztunnel's listeners there, and its open
// outbound connections. A pod whose namespace cannot be opened is not
// checkable; a mesh source that cannot answer is the Enrollment's error.
func CheckEnrollment(src MeshSource, procRoot string, now time.Time) *wire.Enrollment {
	e := &wire.Enrollment{Time: now, Pods: []wire.PodEnrollment{}}
	zt, err := src.Ztunnels()
	if err != nil {
		e.Error = fmt.Sprintf("finding the ztunnel processes: %v", err)
		return e
	}
	pods, err := src.AmbientPods()
	if err != nil {
		e.Error = fmt.Sprintf("listing the ambient pods: %v", err)
		return e
	}
	var current map[uint64]bool
	zerr := ""
	if zt.Current == 0 {
		zerr = "no ztunnel runs on the node"
	} else {
		e.Ztunnel = "pid " + strconv.Itoa(zt.Current)
		if current, err = zt.sockets(procRoot, zt.Current); err != nil {
			zerr = fmt.Sprintf("reading ztunnel's sockets: %v", err)
		}
	}
	// Every ztunnel's sockets, read once and again (fresh) when a pod seems
	// to bypass: a relay ztunnel opens after a read is not in it, and its
	// upstream socket in the pod's namespace would look like the app's own
	// connection. The fresh read lists the ztunnels again too: one started
	// since the check began (a surge's new one) is in neither list above.
	var known map[uint64]bool
	sockets := func(fresh bool) map[uint64]bool {
		if known != nil && !fresh {
			return known
		}
		lists := []Ztunnels{zt}
		if fresh {
			if again, err := src.Ztunnels(); err == nil {
				lists = append(lists, again)
			}
		}
		// A process is read once; a PID listed again as another process
		// (the first exited, its PID reused) is read again.
		type proc struct {
			pid int
			id  procID
		}
		all, read := map[uint64]bool{}, map[proc]bool{}
		for _, z := range lists {
			for _, pid := range append([]int{z.Current}, z.Older...) {
				p := proc{pid, z.procs[pid]}
				if pid == 0 || read[p] {
					continue
				}
				read[p] = true
				inodes, err := z.sockets(procRoot, pid)
				if err != nil {
					continue // exited since it was listed: its sockets are gone with it
				}
				for ino := range inodes {
					all[ino] = true
				}
			}
		}
		known = all
		return all
	}
	for _, p := range pods {
		e.Pods = append(e.Pods, checkPod(p, procRoot, current, sockets, zerr))
	}
	sort.Slice(e.Pods, func(i, j int) bool { return e.Pods[i].Key() < e.Pods[j].Key() })
	return e
}

func checkPod(p MeshPod, procRoot string, current map[uint64]bool, ztunnelSockets func(fresh bool) map[uint64]bool, zerr string) wire.PodEnrollment {
	r := wire.PodEnrollment{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	notCheckable := func(why string) wire.PodEnrollment {
		r.Result, r.Detail = wire.NotCheckable, why
		return r
	}
	failed := func(c wire.EnrollmentCheck, detail string) wire.PodEnrollment {
		r.Result, r.Failed, r.Detail = wire.NotEnrolled, c, detail
		return r
	}
	if p.Netns == "" {
		return notCheckable("its network namespace was not found: " + p.NoNetns)
	}
	fd, err := openNetns(procRoot, p)
	if err != nil {
		return notCheckable(fmt.Sprintf("opening its network namespace: %v", err))
	}
	defer unix.Close(fd)
	if detail, err := checkRedirection(fd); err != nil {
		var legacy legacyTablesError
		if errors.As(err, &legacy) {
			return notCheckable("cannot check its redirection: " + legacy.Error())
		}
		return notCheckable(fmt.Sprintf("reading its nftables ruleset: %v", err))
	} else if detail != "" {
		return failed(wire.CheckRedirection, detail)
	}
	if zerr != "" {
		return failed(wire.CheckListeners, zerr)
	}
	socks, err := readSockets(fd)
	if err != nil {
		return notCheckable(fmt.Sprintf("reading its sockets: %v", err))
	}
	if detail := checkListeners(socks, current); detail != "" {
		return failed(wire.CheckListeners, detail)
	}
	cands, _ := bypassing(socks, ztunnelSockets(false), nil)
	if len(cands) == 0 {
		r.Result = wire.Enrolled
		return r
	}
	// ztunnel's sockets read before this pod's table may miss a relay it
	// opened since; the app's connections left are looked up in conntrack.
	nat := func(local, remote netip.AddrPort) (ctTuple, error) { return conntrackReply(fd, local, remote) }
	if cands, err = bypassing(socks, ztunnelSockets(true), nat); err != nil {
		return notCheckable(fmt.Sprintf("reading its conntrack table: %v", err))
	}
	if len(cands) > 0 {
		// A connection seen half is no bypass: the socket tables are read
		// one bucket at a time (a connection opened during the read can
		// show its app side without ztunnel's), and one ztunnel resets at
		// its drain deadline shows its app side until the reset is
		// delivered, which the kernel defers to softirq. Only a connection
		// a second read bypassRecheck later still shows, against ztunnel's
		// sockets read again, counts.
		time.Sleep(bypassRecheck)
		again, err := readSockets(fd)
		if err != nil {
			return notCheckable(fmt.Sprintf("reading its sockets: %v", err))
		}
		left, err := bypassing(again, ztunnelSockets(true), nat)
		if err != nil {
			return notCheckable(fmt.Sprintf("reading its conntrack table: %v", err))
		}
		if still := confirmed(cands, left); len(still) > 0 {
			return failed(wire.CheckBypass, fmt.Sprintf("%d open connections go straight to their peer, not through ztunnel's outbound listener (first %s)", len(still), still[0]))
		}
	}
	r.Result = wire.Enrolled
	return r
}

// openNetns opens a pod's network namespace. One named by a process under
// procRoot (<procRoot>/<pid>/ns/net, as KubeMesh finds them) is opened
// through that process's /proc directory, and only while the process runs
// in the pod's cgroup: a PID gone to another process since the scan never
// opens that process's namespace.
func openNetns(procRoot string, p MeshPod) (int, error) {
	rest, under := strings.CutPrefix(p.Netns, filepath.Clean(procRoot)+"/")
	pidDir, isNetns := strings.CutSuffix(rest, "/ns/net")
	pid, err := strconv.Atoi(pidDir)
	if !under || !isNetns || err != nil || pid <= 0 {
		return unix.Open(p.Netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	d, err := openProcDir(procRoot, pid)
	if err != nil {
		return -1, fmt.Errorf("its process %d %w", pid, errGone)
	}
	defer d.Close()
	id, alive, err := d.identify()
	if err != nil || !alive || id.uid != p.UID {
		return -1, fmt.Errorf("its process %d %w", pid, errGone)
	}
	return d.openat("ns/net", unix.O_RDONLY)
}

// Redirection layouts the check accepts (docs/enrollment.md): Istio's
// nftables backend (1.27 and later, in-pod tables "inet istio-proxy-*")
// and its iptables in-pod rules (1.22 to 1.26, and later without the
// nftables backend) as iptables-nft writes them (chains ISTIO_OUTPUT and
// ISTIO_PRERT, REDIRECT or TPROXY targets).
//
// Istio's in-pod nftables tables have been named both ways: istio-proxy-*
// in the layout the live data plane's stand-in writes, istio-ambient-*
// (istio-ambient-nat, -mangle, -raw) as the istio-cni tools/istioctl pins
// writes them (seen on sim/cluster's real node).
var nftTablePrefixes = []string{"istio-proxy-", "istio-ambient-"}

// checkRedirection reads the nftables ruleset of a namespace and returns
// what is missing ("" when the redirect to 15001 and to 15006 are both there).
func checkRedirection(netnsFd int) (string, error) {
	c, err := nftables.New(nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return "", err
	}
	chains, err := c.ListChains()
	if err != nil {
		return "", fmt.Errorf("listing chains: %w", err)
	}
	var out, in bool
	var istioChains int
	for _, ch := range chains {
		native := ch.Table.Family == nftables.TableFamilyINet &&
			slices.ContainsFunc(nftTablePrefixes, func(p string) bool { return strings.HasPrefix(ch.Table.Name, p) })
		legacy := strings.HasPrefix(ch.Name, "ISTIO_")
		if !native && !legacy {
			continue
		}
		istioChains++
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			return "", fmt.Errorf("listing the rules of chain %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			for _, port := range redirectPorts(r.Exprs) {
				out = out || port == ztunnelOutbound
				in = in || port == ztunnelInbound
			}
		}
	}
	if istioChains == 0 {
		// istio-cni's iptables backend on a host whose iptables is the
		// legacy one writes x_tables tables, which nftables netlink does
		// not show: their absence from the ruleset proves nothing.
		tables, err := legacyTables(netnsFd)
		if err != nil {
			return "", fmt.Errorf("looking for legacy iptables tables: %w", err)
		}
		if len(tables) > 0 {
			return "", legacyTablesError{tables}
		}
	}
	switch {
	case istioChains == 0:
		return "no istio-cni rules in its netns (no table inet " + strings.Join(nftTablePrefixes, "* or ") + "*, no ISTIO_* chain)", nil
	case !out && !in:
		return fmt.Sprintf("istio-cni's chains redirect neither to %d nor to %d", ztunnelOutbound, ztunnelInbound), nil
	case !out:
		return fmt.Sprintf("no rule redirects outbound traffic to %d", ztunnelOutbound), nil
	case !in:
		return fmt.Sprintf("no rule redirects inbound traffic to %d", ztunnelInbound), nil
	}
	return "", nil
}

// legacyTablesError says a namespace has legacy iptables tables, which the
// check cannot read.
type legacyTablesError struct{ tables []string }

func (e legacyTablesError) Error() string {
	return fmt.Sprintf("its netns holds legacy iptables tables (%s), which the agent cannot read (it reads nftables over netlink): istio-cni's iptables backend writes them on a host whose iptables is the legacy one", strings.Join(e.tables, ", "))
}

// legacyTables are the legacy iptables (x_tables) tables of a namespace
// that hold a rule or a chain of their own ("ip:nat", "ip6:mangle"), read
// inside it: the tables the kernel lists in /proc/thread-self/net/
// ip{,6}_tables_names (those something has used there: an iptables-legacy
// binary, if only to list them), and of each its entry count
// (IPT_SO_GET_INFO, CAP_NET_ADMIN), more than its built-in chains' policies
// and the table's end when anything was added. A kernel without legacy
// iptables has no such file: none.
func legacyTables(netnsFd int) ([]string, error) {
	var tables []string
	err := inNetns(netnsFd, func() error {
		for _, fam := range []struct {
			name          string
			domain, level int
		}{{"ip", unix.AF_INET, unix.SOL_IP}, {"ip6", unix.AF_INET6, unix.SOL_IPV6}} {
			b, err := os.ReadFile("/proc/thread-self/net/" + fam.name + "_tables_names")
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			for _, t := range strings.Fields(string(b)) {
				used, err := legacyTableUsed(fam.domain, fam.level, t)
				if err != nil {
					return fmt.Errorf("%s table %s: %w", fam.name, t, err)
				}
				if used {
					tables = append(tables, fam.name+":"+t)
				}
			}
		}
		return nil
	})
	return tables, err
}

// legacyTableUsed asks the kernel for a legacy table's summary (struct
// ipt_getinfo: name[32], valid_hooks, hook_entry[5], underflow[5],
// num_entries, size; the same for ip6tables): an unused table has one entry
// per built-in chain (its policy) and one that ends the table.
func legacyTableUsed(domain, level int, table string) (bool, error) {
	const soGetInfo = 64 // IPT_SO_GET_INFO, IP6T_SO_GET_INFO
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var info [84]byte
	copy(info[:32], table)
	size := uint32(len(info))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soGetInfo,
		uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0); errno != 0 {
		return false, fmt.Errorf("getsockopt IPT_SO_GET_INFO: %w", errno)
	}
	hooks := bits.OnesCount32(binary.NativeEndian.Uint32(info[32:36]))
	entries := binary.NativeEndian.Uint32(info[76:80])
	return int(entries) > hooks+1, nil
}

// redirectPorts are the ports a rule redirects or tproxies to: an nft
// redirect or tproxy whose port register was loaded by an immediate, or an
// xtables REDIRECT or TPROXY target.
func redirectPorts(exprs []expr.Any) []uint16 {
	regs := map[uint32]uint16{}
	var ports []uint16
	for _, e := range exprs {
		switch x := e.(type) {
		case *expr.Immediate:
			if len(x.Data) == 2 {
				regs[x.Register] = binary.BigEndian.Uint16(x.Data)
			}
		case *expr.Redir:
			if p, ok := regs[x.RegisterProtoMin]; ok {
				ports = append(ports, p)
			}
		case *expr.TProxy:
			if p, ok := regs[x.RegPort]; ok {
				ports = append(ports, p)
			}
		case *expr.Target:
			if p, ok := targetPort(x); ok {
				ports = append(ports, p)
			}
		}
	}
	return ports
}

// targetPort is the port of an xtables REDIRECT or TPROXY target.
func targetPort(t *expr.Target) (uint16, bool) {
	switch info := t.Info.(type) {
	case *xt.NatIPv4MultiRangeCompat:
		if t.Name == "REDIRECT" && len(*info) > 0 {
			return (*info)[0].MinPort, true
		}
	case *xt.NatRange:
		if t.Name == "REDIRECT" {
			return info.MinPort, true
		}
	case *xt.Unknown:
		// xt_tproxy_target_info (rev 0): mark mask and value, an IPv4
		// address, the port; rev 1: the address takes 16 bytes.
		off := 12
		if t.Rev == 1 {
			off = 24
		}
		if t.Name == "TPROXY" && len(*info) >= off+2 {
			return binary.BigEndian.Uint16((*info)[off : off+2]), true
		}
	}
	return 0, false
}

// tcpSock is one line of /proc/net/tcp{,6}.
type tcpSock struct {
	local, remote netip.AddrPort
	state         uint8
	inode         uint64
}

const (
	tcpEstablished = 0x01
	tcpListen      = 0x0A
)

// readSockets reads a namespace's TCP sockets from /proc/thread-self/net/tcp
// and tcp6, on a thread moved into the namespace for the read.
func readSockets(netnsFd int) ([]tcpSock, error) {
	var socks []tcpSock
	err := inNetns(netnsFd, func() error {
		for _, f := range []string{"tcp", "tcp6"} {
			s, err := parseProcNetTCP("/proc/thread-self/net/" + f)
			if err != nil {
				return err
			}
			socks = append(socks, s...)
		}
		return nil
	})
	return socks, err
}

// inNetns runs fn on a thread moved into the namespace, and moves it back.
// A thread that cannot be moved back is never reused: it stays locked, so
// it exits with this goroutine.
func inNetns(netnsFd int, fn func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening this thread's network namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(netnsFd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering the network namespace: %w", err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return errors.Join(ferr, fmt.Errorf("returning to the agent's network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

func parseProcNetTCP(path string) ([]tcpSock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tcpSock
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		local, err1 := parseHexAddr(fs[1])
		remote, err2 := parseHexAddr(fs[2])
		st, err3 := strconv.ParseUint(fs[3], 16, 8)
		ino, err4 := strconv.ParseUint(fs[9], 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("%s: line %q: %w", path, sc.Text(), err)
		}
		out = append(out, tcpSock{local: local, remote: remote, state: uint8(st), inode: ino})
	}
	return out, sc.Err()
}

// parseHexAddr parses "0100007F:1F90": the address as the kernel's 32-bit
// words in host (little-endian) order, the port in hex.
func parseHexAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(raw); i += 4 { // each 32-bit word is little-endian
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q", s)
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// checkListeners returns what is missing of the current ztunnel's listeners
// in a namespace ("" when it listens on 15001, 15006 and 15008).
func checkListeners(socks []tcpSock, current map[uint64]bool) string {
	var missing []string
	for _, port := range []uint16{ztunnelOutbound, ztunnelInbound, ztunnelHBONE} {
		var any, ours bool
		for _, s := range socks {
			if s.state == tcpListen && s.local.Port() == port {
				any = true
				ours = ours || current[s.inode]
			}
		}
		switch {
		case !any:
			missing = append(missing, fmt.Sprintf("nothing listens on %d", port))
		case !ours:
			missing = append(missing, fmt.Sprintf("only an older ztunnel listens on %d", port))
		}
	}
	return strings.Join(missing, ", ")
}

// bypassRecheck is how long after a read that finds bypassing connections
// the second read is made.
const bypassRecheck = 200 * time.Millisecond

// confirmed is the connections of b also in a (both sorted).
func confirmed(a, b []string) []string {
	in := map[string]bool{}
	for _, c := range a {
		in[c] = true
	}
	var out []string
	for _, c := range b {
		if in[c] {
			out = append(out, c)
		}
	}
	return out
}

// bypassing lists the namespace's open outbound connections that do not go
// through ztunnel: established sockets not ztunnel's own, from a port
// nothing listens on (an active open), to a peer neither loopback nor the
// pod's own address, on a port that is not ztunnel's, whose other end is
// not a connection accepted on 15001 in the namespace (a redirected
// connect). ztunnel's accepted socket has the app's address and port as its
// peer, unless NAT gave the connection another source port: the reply tuple
// of a redirect (15001 → the app's address and port) can be taken by an
// older connection from the same port to another peer (ports are shared
// across peers), and NAT then picks a free source port. With nat, a
// connection not matched by its port is looked up in the namespace's
// conntrack table, whose reply tuple names the port ztunnel sees; without
// it, it is listed.
func bypassing(socks []tcpSock, ztunnel map[uint64]bool, nat func(local, remote netip.AddrPort) (ctTuple, error)) ([]string, error) {
	listening := map[uint16]bool{}
	redirected := map[netip.AddrPort]bool{}
	for _, s := range socks {
		switch {
		case s.state == tcpListen:
			listening[s.local.Port()] = true
		case s.state == tcpEstablished && s.local.Port() == ztunnelOutbound:
			redirected[s.remote] = true
		}
	}
	var out []string
	for _, s := range socks {
		// A peer at the pod's own address is the pod itself (ztunnel's
		// inbound delivery to the app, or the app calling itself): the
		// connection never leaves the namespace.
		if s.state != tcpEstablished || ztunnel[s.inode] || listening[s.local.Port()] || s.remote.Addr().IsLoopback() || s.remote.Addr() == s.local.Addr() {
			continue
		}
		switch s.remote.Port() {
		case ztunnelOutbound, ztunnelInbound, ztunnelHBONE:
			continue
		}
		if redirected[s.local] {
			continue
		}
		if nat != nil {
			t, err := nat(s.local, s.remote)
			if err != nil && !errors.Is(err, errNoConntrack) {
				return nil, err
			}
			if err == nil && t.src.Port() == ztunnelOutbound && redirected[t.dst] {
				continue
			}
		}
		out = append(out, s.local.String()+" → "+s.remote.String())
	}
	sort.Strings(out)
	return out, nil
}

// enrollmentMetrics is the gauge of the last check's counts by result.
func newEnrollmentGauge(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodewise_agent_enrollment_pods",
		Help: "Ambient pods on the node by enrollment result at the last check (enrolled, not-enrolled, not-checkable; docs/enrollment.md).",
	}, []string{"result"})
	return g, reg.Register(g)
}

// enrollment checks the node's ambient pods and sets the gauge; nil when
// the agent has no mesh source.
func (a *Agent) enrollment(now time.Time) *wire.Enrollment {
	if a.cfg.Mesh == nil {
		return nil
	}
	e := CheckEnrollment(a.cfg.Mesh, a.cfg.ProcRoot, now)
	counts := map[wire.EnrollmentResult]int{}
	for _, p := range e.Pods {
		counts[p.Result]++
	}
	for _, r := range []wire.EnrollmentResult{wire.Enrolled, wire.NotEnrolled, wire.NotCheckable} {
		a.enrollGauge.WithLabelValues(string(r)).Set(float64(counts[r]))
	}
	if e.Error != "" {
		a.log.Warn("enrollment not checked", zap.String("error", e.Error))
	}
	return e
}
