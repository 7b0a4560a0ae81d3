package zds

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"istio.io/istio/pkg/zdsapi"
)

// cniServer is istio-cni's side of one ZDS connection, as its node agent
// speaks it (cni/pkg/nodeagent/ztunnelserver_linux.go): it reads the hello,
// then sends a request per message, an Add with the netns descriptor in
// SCM_RIGHTS, and reads the Ack.
type cniServer struct {
	t *testing.T
	c *net.UnixConn
}

func (s cniServer) send(req *zdsapi.WorkloadRequest, fd int) string {
	s.t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		s.t.Fatal(err)
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := s.c.WriteMsgUnix(b, oob, nil); err != nil {
		s.t.Fatal(err)
	}
	s.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1024)
	n, err := s.c.Read(buf)
	if err != nil {
		s.t.Fatalf("no ack: %v", err)
	}
	var resp zdsapi.WorkloadResponse
	if err := proto.Unmarshal(buf[:n], &resp); err != nil {
		s.t.Fatal(err)
	}
	if resp.GetAck() == nil {
		s.t.Fatalf("response %v is no ack", &resp)
	}
	return resp.GetAck().GetError()
}

func add(uid string) *zdsapi.WorkloadRequest {
	return &zdsapi.WorkloadRequest{Payload: &zdsapi.WorkloadRequest_Add{Add: &zdsapi.AddWorkload{Uid: uid,
		WorkloadInfo: &zdsapi.WorkloadInfo{Name: "pod-" + uid, Namespace: "ambient", ServiceAccount: "default"}}}}
}

var snapshotSent = &zdsapi.WorkloadRequest{Payload: &zdsapi.WorkloadRequest_SnapshotSent{SnapshotSent: &zdsapi.SnapshotSent{}}}

// accept takes ztunnel's next connection and its hello.
func accept(t *testing.T, l *net.UnixListener) cniServer {
	t.Helper()
	l.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := l.AcceptUnix()
	if err != nil {
		t.Fatalf("ztunnel never connected: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	buf := make([]byte, 1024)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no hello: %v", err)
	}
	var hello zdsapi.ZdsHello
	if err := proto.Unmarshal(buf[:n], &hello); err != nil || hello.Version != zdsapi.Version_V1 {
		t.Fatalf("hello %v (%v), want version V1", &hello, err)
	}
	return cniServer{t, c}
}

// newNetns makes a network namespace and returns a descriptor of it (the
// namespace lives while some descriptor of it is open).
func newNetns(t *testing.T) int {
	t.Helper()
	fds := make(chan int, 1)
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errs <- err
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errs <- err
			return
		}
		fds <- fd
	}()
	select {
	case err := <-errs:
		t.Fatalf("a network namespace for the test (root needed): %v", err)
	case fd := <-fds:
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	return -1
}

// listening are the TCP ports listened on in a namespace, read from
// /proc/thread-self/net/tcp{,6} on a thread moved into it.
func listening(t *testing.T, fd int) map[int]bool {
	t.Helper()
	ports := map[int]bool{}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		for _, name := range []string{"tcp", "tcp6"} {
			f, err := os.Open("/proc/thread-self/net/" + name)
			if err != nil {
				done <- err
				return
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fs := strings.Fields(sc.Text())
				if len(fs) < 4 || fs[3] != "0A" { // TCP_LISTEN
					continue
				}
				var port int
				if _, err := fmt.Sscanf(fs[1][strings.LastIndex(fs[1], ":")+1:], "%X", &port); err == nil {
					ports[port] = true
				}
			}
			f.Close()
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return ports
}

func wantListening(t *testing.T, what string, fd int, want bool) {
	t.Helper()
	got := listening(t, fd)
	for _, p := range Ports {
		if got[p] != want {
			t.Errorf("%s: listening on %d in the pod's netns is %v, want %v (listening: %v)", what, p, got[p], want, got)
		}
	}
}

// TestZtunnelSpeaksZDS drives the stand-in as istio-cni's node agent does:
// its hello, an Add with the pod's netns (listeners opened inside it), a
// Del (closed), and after a reconnect a snapshot that keeps one pod and
// drops the other.
func TestZtunnelSpeaksZDS(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ztunnel.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	z := &Ztunnel{Socket: sock}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- z.Run(ctx) }()
	defer func() {
		cancel()
		<-ran
	}()

	cni := accept(t, l)
	a, b := newNetns(t), newNetns(t)
	if e := cni.send(snapshotSent, -1); e != "" || !z.Ready() {
		t.Fatalf("the empty snapshot: ack %q, ready %v; want ok and ready", e, z.Ready())
	}
	for uid, fd := range map[string]int{"a": a, "b": b} {
		if e := cni.send(add(uid), fd); e != "" {
			t.Fatalf("add %s: ack error %q", uid, e)
		}
	}
	wantListening(t, "after add a", a, true)
	wantListening(t, "after add b", b, true)
	if got := z.Pods(); len(got) != 2 || got[0] != "ambient/pod-a (a)" {
		t.Errorf("pods %q, want a and b", got)
	}
	if e := cni.send(add("c"), -1); !strings.Contains(e, "0 descriptors") {
		t.Errorf("an add without its netns: ack %q, want an error naming the missing descriptor", e)
	}
	if e := cni.send(&zdsapi.WorkloadRequest{Payload: &zdsapi.WorkloadRequest_Del{Del: &zdsapi.DelWorkload{Uid: "a"}}}, -1); e != "" {
		t.Fatalf("del a: ack error %q", e)
	}
	wantListening(t, "after del a", a, false)

	// istio-cni restarts: a new connection, a snapshot keeping none of the
	// pods (b's netns not sent, say): b is dropped on SnapshotSent.
	cni.c.Close()
	cni = accept(t, l)
	if z.Ready() {
		t.Errorf("ready before the new connection's snapshot")
	}
	if e := cni.send(&zdsapi.WorkloadRequest{Payload: &zdsapi.WorkloadRequest_Keep{Keep: &zdsapi.KeepWorkload{Uid: "x"}}}, -1); e != "" {
		t.Fatalf("keep: ack error %q", e)
	}
	wantListening(t, "b before the snapshot ends", b, true)
	if e := cni.send(snapshotSent, -1); e != "" || !z.Ready() {
		t.Fatalf("snapshot: ack %q, ready %v", e, z.Ready())
	}
	wantListening(t, "b, not in the snapshot", b, false)
	if got := z.Pods(); len(got) != 0 {
		t.Errorf("pods %q after a snapshot of none", got)
	}
}
