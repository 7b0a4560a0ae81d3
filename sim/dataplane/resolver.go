package dataplane

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nodewise/nodewise/nodeagent"
)

// Resolver returns the node agent's view of one simulated node: the network
// namespace inode of every app pod the data plane runs there. One node agent
// per simulated node uses it, so each agent measures only its node's pods.
func (d *DataPlane) Resolver(node string) nodeagent.Resolver { return nodeResolver{d: d, node: node} }

type nodeResolver struct {
	d    *DataPlane
	node string
}

// Pods implements nodeagent.Resolver.
func (r nodeResolver) Pods() (map[uint32]nodeagent.Pod, error) {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	out := map[uint32]nodeagent.Pod{}
	for uid := range r.d.byNode[r.node] {
		sb := r.d.pods[uid]
		ino, err := netnsInode(sb.netns)
		if err != nil {
			return nil, err
		}
		ns, name := splitKey(sb.key)
		out[ino] = nodeagent.Pod{Namespace: ns, Name: name, UID: string(uid)}
	}
	return out, nil
}

func netnsInode(name string) (uint32, error) {
	st, err := os.Stat(filepath.Join(netnsDir, name))
	if err != nil {
		return 0, fmt.Errorf("reading netns %s: %w", name, err)
	}
	return uint32(st.Sys().(*syscall.Stat_t).Ino), nil
}

func splitKey(key string) (string, string) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}
