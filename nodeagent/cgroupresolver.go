package nodeagent

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupResolver attributes network namespaces to pods from what the eBPF
// programs saw: the cgroup v2 id of an application process acting on a
// socket inside its own namespace. The cgroup directory with that inode
// under CgroupRoot has the pod UID in its path (kubepods…pod<uid>). It needs
// no access to other processes' /proc entries, so the agent runs without
// hostPID or CAP_SYS_PTRACE.
//
// HostNetns is never attributed: processes of hostNetwork pods live in it.
type CgroupResolver struct {
	Owners     func() (map[uint32][]uint64, error) // netns inode → cgroup ids seen in it
	CgroupRoot string                              // default /sys/fs/cgroup
	HostNetns  uint32
	Lister     PodLister     // optional
	Retain     time.Duration // default 10m

	mu    sync.Mutex
	paths map[uint64]string // cgroup id (directory inode) → path
	seen  map[uint32]seenPod
}

// cgroupPaths walks the cgroup v2 tree and maps directory inodes to paths.
func cgroupPaths(root string) (map[uint64]string, error) {
	out := map[uint64]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return fs.SkipDir // a cgroup removed during the walk
		}
		if !d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil {
			out[st.Ino] = path
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walking cgroups under %s: %w", root, err)
	}
	return out, nil
}

// Pods returns the namespaces whose owner cgroup belongs to a pod.
func (r *CgroupResolver) Pods() (map[uint32]Pod, error) {
	owners, err := r.Owners()
	if err != nil {
		return nil, err
	}
	root := r.CgroupRoot
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	retain := r.Retain
	if retain == 0 {
		retain = 10 * time.Minute
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[uint32]seenPod{}
	}
	uids := map[uint32]string{}
	rescanned := false
	for ns, cgs := range owners {
		if ns == r.HostNetns {
			continue
		}
		// Visitors (CNI plugins, the test's own threads) leave non-pod
		// cgroups here; a namespace is the pod's when exactly one pod UID
		// shows up among them.
		found := map[string]bool{}
		for _, cg := range cgs {
			path, ok := r.paths[cg]
			if !ok && !rescanned {
				// A cgroup we have not seen: rescan the tree, once per call.
				if r.paths, err = cgroupPaths(root); err != nil {
					return nil, err
				}
				rescanned = true
				path, ok = r.paths[cg]
			}
			if !ok {
				r.paths[cg] = "" // gone already, or not under root: no rescan for it again
				continue
			}
			if uid, ok := podUIDFromCgroup(path); ok {
				found[uid] = true
			}
		}
		if len(found) == 1 {
			for uid := range found {
				uids[ns] = uid
			}
		}
	}
	var names map[string]Pod
	if r.Lister != nil && len(uids) > 0 {
		if names, err = r.Lister.PodsByUID(context.Background()); err != nil {
			return nil, fmt.Errorf("listing the node's pods: %w", err)
		}
	}
	return remember(r.seen, uids, names, time.Now(), retain), nil
}

// unionResolver asks each resolver in turn; the first to name a namespace wins.
type unionResolver []Resolver

func (u unionResolver) Pods() (map[uint32]Pod, error) {
	out := map[uint32]Pod{}
	var firstErr error
	ok := false
	for _, r := range u {
		pods, err := r.Pods()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		ok = true
		for ns, p := range pods {
			if _, taken := out[ns]; !taken {
				out[ns] = p
			}
		}
	}
	if !ok && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}
