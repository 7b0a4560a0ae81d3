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
// programs saw: the cgroup v2 ids of the processes that made application
// sockets in each namespace (the kernel keeps it on the socket; an accepted
// socket has its listener's). The cgroup directory with that inode
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
	// The pod UIDs among each namespace's cgroups. Visitors (CNI plugins,
	// the test's own threads) leave non-pod cgroups, which drop out here.
	found := map[uint32]map[string]bool{}
	namespacesOf := map[string]int{} // pod UID → how many namespaces show it
	rescanned := false
	for ns, cgs := range owners {
		if ns == r.HostNetns {
			continue
		}
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
			uid, ok := podUIDFromCgroup(path)
			if !ok || found[ns][uid] {
				continue
			}
			if found[ns] == nil {
				found[ns] = map[string]bool{}
			}
			found[ns][uid] = true
			namespacesOf[uid]++
		}
	}
	// A namespace is the pod's when exactly one pod UID shows up in it.
	// Else the pod seen in the fewest namespaces is its own, if no other
	// ties with it: a visitor from another pod (an agent that opens
	// sockets in every pod) goes to many, a pod to its own (and, for a
	// while, the one its sandbox had before a restart).
	uids := map[uint32]string{}
	for ns, set := range found {
		best, tied := "", false
		for uid := range set {
			switch {
			case best == "" || namespacesOf[uid] < namespacesOf[best]:
				best, tied = uid, false
			case namespacesOf[uid] == namespacesOf[best]:
				tied = true
			}
		}
		if !tied {
			uids[ns] = best
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
