package nodeagent

import "sync"

// Pod identifies the pod a network namespace belongs to.
type Pod struct {
	Namespace string
	Name      string
	UID       string
}

// Resolver maps network namespace inodes to the pods that own them. A
// namespace it does not return (the host's, say) is never attributed to a
// pod: its traffic is left out of every snapshot.
type Resolver interface {
	Pods() (map[uint32]Pod, error)
}

// StaticResolver is a Resolver with a fixed, settable table. Tests and the
// simulator supply one.
type StaticResolver struct {
	mu   sync.Mutex
	pods map[uint32]Pod
}

// NewStaticResolver returns a StaticResolver holding a copy of pods.
func NewStaticResolver(pods map[uint32]Pod) *StaticResolver {
	r := &StaticResolver{pods: map[uint32]Pod{}}
	for k, v := range pods {
		r.pods[k] = v
	}
	return r
}

// Set adds or replaces one namespace's pod.
func (r *StaticResolver) Set(netns uint32, p Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods[netns] = p
}

// Pods returns a copy of the table.
func (r *StaticResolver) Pods() (map[uint32]Pod, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[uint32]Pod, len(r.pods))
	for k, v := range r.pods {
		out[k] = v
	}
	return out, nil
}
