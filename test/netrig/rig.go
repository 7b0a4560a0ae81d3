// Package netrig is the real-kernel test rig for the node agent: network
// namespaces joined by veth act as pods, a ztunnel stand-in process listens
// inside each pod namespace, and client loads count what they observe.
//
// Everything the rig creates (namespaces, links, processes) is named with a
// per-run prefix and removed by t.Cleanup. Traffic stays inside those
// namespaces.
package netrig

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/test/testkit"
)

// The main goroutine keeps the process's main thread for itself. Enter
// moves a thread into another network namespace and leaves it there; were
// that thread the main one (the thread-group leader), /proc/self/net of the
// whole process would name the pod's namespace, and anything reading its
// own namespace from /proc/self, such as the node agent under test, would
// mistake the pod for the host. The runtime never kills the main thread, so
// a locked goroutine that exits on it would leave it wedged in the pod's
// namespace for the rest of the test binary.
func init() { runtime.LockOSThread() }

// RequireKernel ends t unless the process is root on a kernel with BTF and
// has iproute2: what loading the agent's eBPF and building namespaces needs
// (a failure under make test, a skip elsewhere: testkit.Unavailable).
func RequireKernel(t testing.TB) {
	t.Helper()
	testkit.RequireRoot(t, "load eBPF or create network namespaces")
	testkit.RequireBTF(t)
	testkit.RequireTools(t, "ip")
}

// Rig is one test's set of namespaces: a hub namespace with a bridge and
// the pods attached to it.
type Rig struct {
	t   testing.TB
	id  string
	Hub *Netns

	mu   sync.Mutex
	pods []*Pod
	echo net.Listener
}

// Netns is a named network namespace the rig created.
type Netns struct {
	Name  string
	Inode uint32
	fd    int
}

// New creates the hub namespace. It registers cleanup of everything the rig
// creates later.
func New(t testing.TB) *Rig {
	t.Helper()
	RequireKernel(t)
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	r := &Rig{t: t, id: "nw" + hex.EncodeToString(b)}
	r.Hub = r.newNetns("hub")
	r.ip("-n", r.Hub.Name, "link", "add", "br0", "type", "bridge")
	r.ip("-n", r.Hub.Name, "addr", "add", "10.77.0.1/24", "dev", "br0")
	r.ip("-n", r.Hub.Name, "link", "set", "br0", "up")
	return r
}

// ip runs one iproute2 command and fails the test on error.
func (r *Rig) ip(args ...string) {
	r.t.Helper()
	if err := runIP(args...); err != nil {
		r.t.Fatal(err)
	}
}

func runIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (r *Rig) newNetns(suffix string) *Netns {
	r.t.Helper()
	name := r.id + "-" + suffix
	r.ip("netns", "add", name)
	r.t.Cleanup(func() {
		if err := runIP("netns", "del", name); err != nil {
			r.t.Logf("cleanup: %v", err)
		}
	})
	path := filepath.Join("/run/netns", name)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		r.t.Fatalf("opening %s: %v", path, err)
	}
	r.t.Cleanup(func() { unix.Close(fd) })
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		r.t.Fatal(err)
	}
	r.ip("-n", name, "link", "set", "lo", "up")
	return &Netns{Name: name, Inode: uint32(st.Ino), fd: fd}
}

// Enter locks the calling goroutine to its thread and moves the thread into
// the namespace for good: sockets the goroutine creates afterwards live
// there. The thread is discarded when the goroutine exits (it stays locked),
// so only call Enter in a goroutine of its own.
func (n *Netns) Enter() error {
	runtime.LockOSThread()
	if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering netns %s: %w", n.Name, err)
	}
	return nil
}

// Do runs fn on a fresh goroutine inside the namespace and waits for it.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		if err := n.Enter(); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Pod is a network namespace with one veth leg on the hub bridge, a pause
// process (so /proc has a process in it) and, once started, a ztunnel
// stand-in.
type Pod struct {
	*Netns
	PodName string
	IP      net.IP
	// PausePID is a process that lives in the namespace for the pod's life.
	PausePID int
	rig      *Rig

	mu      sync.Mutex
	standin *exec.Cmd
}

// AddPod creates pod number len(pods)+1 with address 10.77.0.(n+1).
func (r *Rig) AddPod(name string) *Pod {
	r.t.Helper()
	r.mu.Lock()
	n := len(r.pods) + 1
	r.mu.Unlock()
	if n > 250 {
		r.t.Fatalf("too many pods")
	}
	ns := r.newNetns(fmt.Sprintf("p%d", n))
	p := &Pod{Netns: ns, PodName: name, IP: net.IPv4(10, 77, 0, byte(n+1)).To4(), rig: r}
	hubLeg := fmt.Sprintf("v%d", n)
	r.ip("link", "add", "eth0", "netns", ns.Name, "type", "veth", "peer", "name", hubLeg, "netns", r.Hub.Name)
	r.ip("-n", r.Hub.Name, "link", "set", hubLeg, "master", "br0", "up")
	r.ip("-n", ns.Name, "addr", "add", p.IP.String()+"/24", "dev", "eth0")
	r.ip("-n", ns.Name, "link", "set", "eth0", "up")
	r.ip("-n", ns.Name, "route", "add", "default", "via", "10.77.0.1")
	pause := exec.Command("ip", "netns", "exec", ns.Name, "sleep", "1000000")
	if err := pause.Start(); err != nil {
		r.t.Fatalf("starting pause process in %s: %v", ns.Name, err)
	}
	p.PausePID = pause.Process.Pid
	r.t.Cleanup(func() {
		_ = pause.Process.Kill()
		_ = pause.Wait()
	})
	r.mu.Lock()
	r.pods = append(r.pods, p)
	r.mu.Unlock()
	return p
}

// PodCgroup creates a cgroup v2 directory shaped like the kubelet's
// (<root>/<rig id>/kubepods/besteffort/pod<uid>) and removes it at cleanup.
// It returns the directory; root is the cgroup v2 mount.
func (r *Rig) PodCgroup(root, uid string) string {
	r.t.Helper()
	base := filepath.Join(root, r.id)
	dir := filepath.Join(base, "kubepods", "besteffort", "pod"+uid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Fatalf("creating cgroup %s: %v", dir, err)
	}
	r.t.Cleanup(func() {
		// Children first; a cgroup directory is removed with rmdir. The
		// processes in it were killed by earlier cleanups.
		for d := dir; len(d) >= len(base); d = filepath.Dir(d) {
			if err := unix.Rmdir(d); err != nil {
				r.t.Logf("cleanup: removing cgroup %s: %v", d, err)
			}
		}
	})
	return dir
}
