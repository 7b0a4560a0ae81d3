// Package zds is the ztunnel side of ZDS, the protocol istio-cni's node
// agent hands ambient pods to ztunnel with (istio.io/istio/pkg/zdsapi): a
// SOCK_SEQPACKET unix socket (/var/run/ztunnel/ztunnel.sock) on which
// ztunnel says hello, and istio-cni sends one WorkloadRequest per message,
// an Add carrying the pod's network namespace as an SCM_RIGHTS descriptor,
// each answered with an Ack.
//
// Ztunnel is the stand-in ztunnel of sim/cluster's real node (the image
// sim/zds/ztunnel builds): for each pod it is handed it opens ztunnel's in-pod
// listeners (15001 outbound, 15006 inbound, 15008 HBONE) inside the pod's
// namespace, the sockets the node agent's enrollment check matches to the
// ztunnel process, and closes them when the pod is deleted. It proxies
// nothing: a connection accepted on them is closed.
package zds

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"istio.io/istio/pkg/zdsapi"
)

// DefaultSocket is where istio-cni listens for ztunnel (its chart mounts
// the host's /var/run/ztunnel into both).
const DefaultSocket = "/var/run/ztunnel/ztunnel.sock"

// Ports are ztunnel's in-pod listeners: outbound, inbound plaintext, HBONE.
var Ports = []int{15001, 15006, 15008}

// Ztunnel serves the pods istio-cni hands it over Socket.
type Ztunnel struct {
	// Socket is istio-cni's ZDS socket; empty means DefaultSocket.
	Socket string
	// Log receives a line per request; nil means the standard logger.
	Log *log.Logger

	mu     sync.Mutex
	pods   map[string]*pod // by pod UID
	synced bool            // a snapshot was received on the current connection
}

type pod struct {
	name      string // namespace/name, as istio-cni sent it
	listeners []net.Listener
}

func (z *Ztunnel) logf(format string, args ...any) {
	if z.Log != nil {
		z.Log.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// Ready reports whether ztunnel is connected to istio-cni and has received
// its snapshot of the node's pods (what ztunnel's readiness reports).
func (z *Ztunnel) Ready() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.synced
}

// Pods are "namespace/name (uid)" of the pods it serves, sorted.
func (z *Ztunnel) Pods() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	var out []string
	for uid, p := range z.pods {
		out = append(out, p.name+" ("+uid+")")
	}
	sort.Strings(out)
	return out
}

// Run connects to istio-cni, and again whenever the connection ends (an
// istio-cni restart), until ctx ends; then it closes every pod's listeners.
func (z *Ztunnel) Run(ctx context.Context) error {
	socket := z.Socket
	if socket == "" {
		socket = DefaultSocket
	}
	defer z.closeAll()
	for {
		err := z.session(ctx, socket)
		z.mu.Lock()
		z.synced = false
		z.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		z.logf("zds: %v; connecting again in 1s", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (z *Ztunnel) closeAll() {
	z.mu.Lock()
	defer z.mu.Unlock()
	for uid, p := range z.pods {
		p.close()
		delete(z.pods, uid)
	}
}

// session is one connection: hello, then requests until it ends.
func (z *Ztunnel) session(ctx context.Context, socket string) error {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	hello, _ := proto.Marshal(&zdsapi.ZdsHello{Version: zdsapi.Version_V1})
	if _, err := c.Write(hello); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	z.logf("zds: connected to %s", socket)
	// The pods of the snapshot istio-cni sends first (Add or Keep): on
	// SnapshotSent, the pods served and not in it are gone.
	snapshot := map[string]bool{}
	inSnapshot := true
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			return fmt.Errorf("reading a request: %w", err)
		}
		if n == 0 {
			return errors.New("istio-cni closed the connection")
		}
		fds, ferr := rights(oob[:oobn])
		var req zdsapi.WorkloadRequest
		ackErr := ""
		switch {
		case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
			ackErr = "truncated message"
		case ferr != nil:
			ackErr = ferr.Error()
		default:
			if err := proto.Unmarshal(buf[:n], &req); err != nil {
				ackErr = "unmarshal: " + err.Error()
			}
		}
		if ackErr == "" {
			ackErr = z.handle(&req, fds, snapshot, &inSnapshot)
		}
		for _, fd := range fds { // handle dups what it keeps
			unix.Close(fd)
		}
		ack, _ := proto.Marshal(&zdsapi.WorkloadResponse{Payload: &zdsapi.WorkloadResponse_Ack{Ack: &zdsapi.Ack{Error: ackErr}}})
		if _, err := c.Write(ack); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	}
}

// rights are the descriptors an SCM_RIGHTS message carried.
func rights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		f, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, fmt.Errorf("control message: %w", err)
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

// handle applies one request and returns the Ack's error ("" for ok).
func (z *Ztunnel) handle(req *zdsapi.WorkloadRequest, fds []int, snapshot map[string]bool, inSnapshot *bool) string {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.pods == nil {
		z.pods = map[string]*pod{}
	}
	switch p := req.Payload.(type) {
	case *zdsapi.WorkloadRequest_Add:
		uid := p.Add.GetUid()
		info := p.Add.GetWorkloadInfo()
		name := info.GetNamespace() + "/" + info.GetName()
		if len(fds) != 1 {
			return fmt.Sprintf("add %s: %d descriptors with it, want its network namespace", uid, len(fds))
		}
		if *inSnapshot {
			snapshot[uid] = true
		}
		if _, ok := z.pods[uid]; ok {
			z.logf("zds: add %s (%s): already served", name, uid)
			return ""
		}
		ls, err := listenIn(fds[0], Ports)
		if err != nil {
			z.logf("zds: add %s (%s): %v", name, uid, err)
			return err.Error()
		}
		z.pods[uid] = &pod{name: name, listeners: ls}
		z.logf("zds: add %s (%s): listening on %v in its netns", name, uid, Ports)
	case *zdsapi.WorkloadRequest_Keep:
		if *inSnapshot {
			snapshot[p.Keep.GetUid()] = true
		}
		z.logf("zds: keep %s", p.Keep.GetUid())
	case *zdsapi.WorkloadRequest_Del:
		uid := p.Del.GetUid()
		if old, ok := z.pods[uid]; ok {
			old.close()
			delete(z.pods, uid)
		}
		z.logf("zds: del %s", uid)
	case *zdsapi.WorkloadRequest_SnapshotSent:
		for uid, old := range z.pods {
			if !snapshot[uid] {
				old.close()
				delete(z.pods, uid)
				z.logf("zds: %s (%s) not in istio-cni's snapshot: removed", old.name, uid)
			}
		}
		*inSnapshot, z.synced = false, true
		z.logf("zds: snapshot received, serving %d pods", len(z.pods))
	default:
		return fmt.Sprintf("unknown request %T", req.Payload)
	}
	return ""
}

func (p *pod) close() {
	for _, l := range p.listeners {
		l.Close()
	}
}

// listenIn opens a TCP listener on each port inside the network namespace
// netnsFd, from a thread moved into it (a socket stays in the namespace it
// was made in), and serves each by closing what it accepts. The thread is a
// goroutine's of its own: one that cannot return to ztunnel's namespace
// stays locked and exits with it.
func listenIn(netnsFd int, ports []int) ([]net.Listener, error) {
	type result struct {
		ls  []net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		ls, err := listenInThread(netnsFd, ports)
		done <- result{ls, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	for _, l := range r.ls {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	return r.ls, nil
}

func listenInThread(netnsFd int, ports []int) ([]net.Listener, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	if err := unix.Setns(netnsFd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering the pod's netns: %w", err)
	}
	var ls []net.Listener
	var lerr error
	for _, port := range ports {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			lerr = fmt.Errorf("listening on %d in the pod's netns: %w", port, err)
			break
		}
		ls = append(ls, l)
	}
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it exits with this goroutine
		// instead of serving another in the pod's namespace.
		lerr = errors.Join(lerr, fmt.Errorf("returning to ztunnel's netns: %w", err))
	} else {
		runtime.UnlockOSThread()
	}
	if lerr != nil {
		for _, l := range ls {
			l.Close()
		}
		return nil, lerr
	}
	return ls, nil
}
