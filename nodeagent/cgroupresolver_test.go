package nodeagent

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCgroupResolverSetsVisitorsAside checks which pod a namespace goes to
// when several pods' cgroups made sockets in it, on a cgroup tree of plain
// directories (the resolver only reads directory inodes and paths).
func TestCgroupResolverSetsVisitorsAside(t *testing.T) {
	root := t.TempDir()
	ino := map[string]uint64{}
	for name, rel := range map[string]string{
		"a":       "kubepods/besteffort/podaaaaaaaa-0000-4000-8000-000000000001",
		"b":       "kubepods/besteffort/podbbbbbbbb-0000-4000-8000-000000000002",
		"x":       "kubepods/besteffort/podcccccccc-0000-4000-8000-000000000003",
		"y":       "kubepods/besteffort/poddddddddd-0000-4000-8000-000000000004",
		"visitor": "kubepods/burstable/podeeeeeeee-0000-4000-8000-000000000005/agent",
		"cni":     "system.slice/containerd.service",
	} {
		dir := filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		ino[name] = st.Ino
	}
	const (
		host = iota + 1
		nsA
		nsB
		nsVisitor
		nsTied
		nsOnlyCNI
	)
	owners := map[uint32][]uint64{
		host:      {ino["a"], ino["visitor"]}, // hostNetwork pods: never attributed, never counted
		nsA:       {ino["visitor"], ino["a"], ino["cni"]},
		nsB:       {ino["b"], ino["visitor"]},
		nsVisitor: {ino["visitor"]},     // its own pod
		nsTied:    {ino["x"], ino["y"]}, // two pods, each seen only here: no way to tell
		nsOnlyCNI: {ino["cni"]},
	}
	r := &CgroupResolver{
		Owners:     func() (map[uint32][]uint64, error) { return owners, nil },
		CgroupRoot: root,
		HostNetns:  host,
	}
	pods, err := r.Pods()
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32]string{
		nsA:       "aaaaaaaa-0000-4000-8000-000000000001",
		nsB:       "bbbbbbbb-0000-4000-8000-000000000002",
		nsVisitor: "eeeeeeee-0000-4000-8000-000000000005",
	}
	for ns, uid := range want {
		if pods[ns].UID != uid {
			t.Errorf("namespace %d: got pod %q, want %q", ns, pods[ns].UID, uid)
		}
	}
	for ns, p := range pods {
		if _, ok := want[ns]; !ok {
			t.Errorf("namespace %d attributed to %q; want it unattributed", ns, p.UID)
		}
	}
}
