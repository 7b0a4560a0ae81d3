package dataplane

import (
	"path/filepath"
	"sort"

	"github.com/nodewise/nodewise/nodeagent"
)

// Mesh returns what the node agent of one simulated node needs to check its
// ambient pods' enrollment: each ambient pod's named network namespace and
// the node's ztunnel stand-in processes (the newest connected one is the
// current generation).
func (d *DataPlane) Mesh(node string) nodeagent.MeshSource { return nodeMesh{d: d, node: node} }

type nodeMesh struct {
	d    *DataPlane
	node string
}

// AmbientPods implements nodeagent.MeshSource: the node's app pods the data
// plane enrolled (their namespace is ambient and they have no sidecar).
func (m nodeMesh) AmbientPods() ([]nodeagent.MeshPod, error) {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	var out []nodeagent.MeshPod
	for uid := range m.d.byNode[m.node] {
		sb := m.d.pods[uid]
		if !sb.ambient || sb.sidecar != nil || sb.stopping {
			continue
		}
		ns, name := splitKey(sb.key)
		out = append(out, nodeagent.MeshPod{
			Pod:   nodeagent.Pod{Namespace: ns, Name: name, UID: string(uid)},
			Netns: filepath.Join(netnsDir, sb.netns),
		})
	}
	return out, nil
}

// Ztunnels implements nodeagent.MeshSource.
func (m nodeMesh) Ztunnels() (nodeagent.Ztunnels, error) {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	var z nodeagent.Ztunnels
	if p := m.d.newestStandin(m.node); p != nil {
		z.Current = p.cmd.Process.Pid
	}
	for _, p := range m.d.standins {
		if pid := p.cmd.Process.Pid; p.node == m.node && pid != z.Current {
			z.Older = append(z.Older, pid)
		}
	}
	sort.Ints(z.Older)
	return z, nil
}
