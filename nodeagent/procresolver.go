package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// PodLister names the pods on this node by UID. The agent's main backs it
// with the Kubernetes API; a nil PodLister leaves names empty and uses the
// UID as the name.
type PodLister interface {
	PodsByUID(ctx context.Context) (map[string]Pod, error)
}

// ProcResolver attributes network namespaces to pods by scanning /proc:
// each process's namespace id (see NamespaceKey) and its /proc/<pid>/cgroup,
// which names the pod UID (the kubelet puts every container under a
// kubepods…pod<uid> cgroup). Processes in the agent's own namespace (the
// node's: the agent runs with hostNetwork) are never attributed:
// hostNetwork pods share it with the node.
//
// A namespace that disappears keeps its pod for Retain, so the last counts
// of a deleted pod are still reported.
type ProcResolver struct {
	ProcRoot string        // default /proc
	Key      NamespaceKey  // default KeyNetnsInode
	Lister   PodLister     // optional
	Retain   time.Duration // default 10m
	now      func() time.Time

	mu   sync.Mutex
	seen map[uint32]seenPod
}

type seenPod struct {
	pod  Pod
	last time.Time
}

var podUIDInCgroup = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)

// eachPodProcess calls fn for every process under the proc root root whose
// cgroup names a pod (podUIDFromCgroup), with the process held by its /proc
// directory (what fn reads through it is of that process, even if its PID
// changes hands meanwhile) and the pod's UID. The directory is closed when
// fn returns. Processes that exit during the walk are left out.
func eachPodProcess(root string, fn func(d *procDir, uid string)) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("listing %s: %w", root, err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		d, err := openProcDir(root, pid)
		if err != nil {
			continue
		}
		if cg, err := d.readFile("cgroup"); err == nil {
			if uid, ok := podUIDFromCgroup(string(cg)); ok {
				fn(d, uid)
			}
		}
		d.Close()
	}
	return nil
}

// podUIDFromCgroup returns the pod UID in the content of a /proc/<pid>/cgroup
// file, for both the systemd (underscores) and cgroupfs (dashes) drivers.
func podUIDFromCgroup(content string) (string, bool) {
	m := podUIDInCgroup.FindStringSubmatch(content)
	if m == nil {
		return "", false
	}
	return strings.ReplaceAll(m[1], "_", "-"), true
}

// NamespaceKey says how a process's network namespace is identified.
type NamespaceKey int

const (
	// KeyNetnsInode is the inode of /proc/<pid>/ns/net, the id the eBPF
	// programs use. Reading another process's link needs ptrace read
	// access to it (CAP_SYS_PTRACE for most pods).
	KeyNetnsInode NamespaceKey = iota
	// KeyProcNet is the inode of /proc/<pid>/net/snmp: procfs creates that
	// file once per network namespace, so its inode tells namespaces apart
	// just as well, and it is world-readable. Proc mode uses it.
	KeyProcNet
)

// of returns the id of the namespace of the process whose /proc directory
// is dir.
func (k NamespaceKey) of(dir string) (uint32, error) {
	if k == KeyProcNet {
		return nsInode(filepath.Join(dir, "net", "snmp"))
	}
	return nsInode(filepath.Join(dir, "ns", "net"))
}

// ofProc is of for a held process.
func (k NamespaceKey) ofProc(d *procDir) (uint32, error) {
	name := "ns/net"
	if k == KeyProcNet {
		name = "net/snmp"
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, 0); err != nil {
		return 0, err
	}
	return uint32(st.Ino), nil
}

func nsInode(path string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return uint32(st.Ino), nil
}

// Pods scans /proc and returns the namespaces it can attribute.
func (r *ProcResolver) Pods() (map[uint32]Pod, error) {
	root := r.ProcRoot
	if root == "" {
		root = "/proc"
	}
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	retain := r.Retain
	if retain == 0 {
		retain = 10 * time.Minute
	}
	// The agent's own namespace, through the same /proc (ProcRoot may be
	// the host's /proc mounted into the container).
	host, err := r.Key.of(filepath.Join(root, "self"))
	if err != nil {
		return nil, fmt.Errorf("reading the agent's own network namespace: %w", err)
	}
	uids, err := scanNetnsUIDs(root, host, r.Key)
	if err != nil {
		return nil, err
	}
	var names map[string]Pod
	if r.Lister != nil {
		names, err = r.Lister.PodsByUID(context.Background())
		if err != nil {
			return nil, fmt.Errorf("listing the node's pods: %w", err)
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[uint32]seenPod{}
	}
	return remember(r.seen, uids, names, now(), retain), nil
}

// remember records the pods seen now in each network namespace (by UID, named
// from names when the pod lister knows them) and returns every pod seen within
// retain, forgetting older ones: a namespace whose processes are briefly gone
// keeps its pod.
func remember(seen map[uint32]seenPod, uids map[uint32]string, names map[string]Pod, now time.Time, retain time.Duration) map[uint32]Pod {
	for ns, uid := range uids {
		p, ok := names[uid]
		if !ok {
			p = Pod{Name: uid}
		}
		p.UID = uid
		seen[ns] = seenPod{pod: p, last: now}
	}
	out := map[uint32]Pod{}
	for ns, s := range seen {
		if now.Sub(s.last) > retain {
			delete(seen, ns)
			continue
		}
		out[ns] = s.pod
	}
	return out
}

// scanNetnsUIDs maps each non-host network namespace to its pod UID. A
// namespace whose processes name two different pods is left out.
func scanNetnsUIDs(root string, host uint32, key NamespaceKey) (map[uint32]string, error) {
	uids := map[uint32]string{}
	conflict := map[uint32]bool{}
	err := eachPodProcess(root, func(d *procDir, uid string) {
		ns, err := key.ofProc(d)
		if err != nil || ns == host {
			return // the process exited, or shares the host's namespace
		}
		if prev, ok := uids[ns]; ok && prev != uid {
			conflict[ns] = true
		}
		uids[ns] = uid
	})
	if err != nil {
		return nil, err
	}
	for ns := range conflict {
		delete(uids, ns)
	}
	return uids, nil
}

// netnsPIDs maps every network namespace to one process in it (the lowest
// PID), for reading that namespace's /proc/<pid>/net counters.
func netnsPIDs(root string, key NamespaceKey) (map[uint32]int, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", root, err)
	}
	out := map[uint32]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ns, err := key.of(filepath.Join(root, e.Name()))
		if err != nil {
			continue
		}
		if prev, ok := out[ns]; !ok || pid < prev {
			out[ns] = pid
		}
	}
	return out, nil
}
