package dataplane

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/nodeagent"
)

// podsOf is a MeshSource over the two pods of twoPods and their stand-in.
type podsOf struct {
	netns []string
	pid   int
}

func (p podsOf) AmbientPods() ([]nodeagent.MeshPod, error) {
	var out []nodeagent.MeshPod
	for _, ns := range p.netns {
		out = append(out, nodeagent.MeshPod{Pod: nodeagent.Pod{Namespace: "sim", Name: ns, UID: ns}, Netns: netnsDir + "/" + ns})
	}
	return out, nil
}

func (p podsOf) Ztunnels() (nodeagent.Ztunnels, error) {
	return nodeagent.Ztunnels{Current: p.pid}, nil
}

// TestEnrollmentOfTheStandins: with traffic running through the stand-in,
// the node agent's check finds both pods enrolled (the istio-cni stand-in's
// rules are in a layout it reads, the stand-in's listeners are its own, the
// client's connections go through 15001); a -nolisten build leaves the first
// pod it serves without its HBONE listener while the traffic still flows.
func TestEnrollmentOfTheStandins(t *testing.T) {
	for _, c := range []struct {
		tag  string
		want map[string]string // pod (srv, cli) → result, failed check
	}{
		{"1.28.1", map[string]string{"srv": "enrolled", "cli": "enrolled"}},
		{"1.28.1-nolisten", map[string]string{"srv": "not-enrolled listeners", "cli": "enrolled"}},
	} {
		client, proc := twoPods(t, "3", c.tag, Traffic{Streams: 2, StreamLife: time.Minute, StreamGap: 100 * time.Millisecond})
		time.Sleep(time.Second)
		prefix := strings.TrimSuffix(client.netns, "-cli")
		e := nodeagent.CheckEnrollment(podsOf{netns: []string{prefix + "-srv", prefix + "-cli"}, pid: proc.cmd.Process.Pid}, "/proc", time.Now())
		if e.Error != "" || len(e.Pods) != 2 {
			t.Fatalf("%s: enrollment %+v", c.tag, e)
		}
		for _, p := range e.Pods {
			role := strings.TrimPrefix(p.Name, prefix+"-")
			got := string(p.Result)
			if p.Failed != "" {
				got += " " + string(p.Failed)
			}
			if got != c.want[role] {
				t.Errorf("%s: pod %s: %s, want %s", c.tag, role, p, c.want[role])
			}
			if p.Result == wire.NotEnrolled && p.Detail != "nothing listens on 15008" {
				t.Errorf("%s: pod %s: detail %q, want only the HBONE listener missing", c.tag, role, p.Detail)
			}
		}
		if tr := client.truth.load(); tr.Requests == 0 || tr.RequestsFailed != 0 {
			t.Errorf("%s: traffic %s: want requests without failures", c.tag, tr)
		}
	}
}

// TestNoReaddDropsOnePodsRedirection: what a -noreadd istio-cni build does
// to the pod it does not re-add (dropRedirect), with traffic running: the
// agent's check finds that pod not enrolled on redirection, the other still
// enrolled, and the traffic goes on without a failure once the rules are
// gone (it now goes straight to the peer instead of through ztunnel).
// Connections redirected before the drop may break at that moment (the NAT
// of their replies goes with the table), and a request then in flight may
// take seconds to fail: the count starts once the next request has begun.
// Dropping twice is no error.
func TestNoReaddDropsOnePodsRedirection(t *testing.T) {
	client, proc := twoPods(t, "3", "1.28.1", Traffic{Streams: 2, StreamLife: time.Minute, StreamGap: 100 * time.Millisecond})
	time.Sleep(time.Second)
	prefix := strings.TrimSuffix(client.netns, "-cli")
	pods := podsOf{netns: []string{prefix + "-srv", prefix + "-cli"}, pid: proc.cmd.Process.Pid}
	for range 2 {
		if err := dropRedirect(client.netns); err != nil {
			t.Fatal(err)
		}
	}
	// A request is counted once dialled, and the client makes one at a time:
	// two counted since the drop, and the one in flight at it (if any) has
	// ended, answered or broken. The count since is the new path's.
	after := client.truth.load()
	for end := time.Now().Add(10 * time.Second); client.truth.load().Requests < after.Requests+2 && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	after = client.truth.load()
	time.Sleep(time.Second)
	e := nodeagent.CheckEnrollment(pods, "/proc", time.Now())
	if e.Error != "" || len(e.Pods) != 2 {
		t.Fatalf("enrollment %+v", e)
	}
	for _, p := range e.Pods {
		switch role := strings.TrimPrefix(p.Name, prefix+"-"); {
		case role == "cli" && (p.Result != wire.NotEnrolled || p.Failed != wire.CheckRedirection):
			t.Errorf("pod cli: %s, want not enrolled on redirection", p)
		case role == "srv" && p.Result != wire.Enrolled:
			t.Errorf("pod srv: %s, want enrolled", p)
		}
	}
	if tr := client.truth.load(); tr.Requests <= after.Requests || tr.RequestsFailed != after.RequestsFailed {
		t.Errorf("traffic %s (once the request in flight at the drop ended: %s): want more requests, none failed since", tr, after)
	}
}

// TestBypassUnhooksOnePodsOutbound: what a -bypass istio-cni build does to
// the pod it re-adds wrong (unhookOutbound), with traffic running: its
// redirect rules are all still there, and its streams opened since go
// straight to the peer. The agent's check finds that pod not enrolled on
// bypass (not on redirection: the rules look right), the server still
// enrolled, and the traffic goes on without a failure.
var bypassDetail = regexp.MustCompile(`^[12] open connections go straight to their peer, not through ztunnel's outbound listener \(first 198\.18\.0\.2:`)

func TestBypassUnhooksOnePodsOutbound(t *testing.T) {
	// Streams live 1 to 1.5 s: those redirected before the fault end, and
	// their successors open without ztunnel, within two seconds.
	client, proc := twoPods(t, "3", "1.28.1", Traffic{Streams: 2, StreamLife: time.Second, StreamGap: 100 * time.Millisecond})
	time.Sleep(time.Second)
	prefix := strings.TrimSuffix(client.netns, "-cli")
	pods := podsOf{netns: []string{prefix + "-srv", prefix + "-cli"}, pid: proc.cmd.Process.Pid}
	before := nodeagent.CheckEnrollment(pods, "/proc", time.Now())
	for _, p := range before.Pods {
		if p.Result != wire.Enrolled {
			t.Fatalf("before the fault: %s, want enrolled", p)
		}
	}
	failedBefore := client.truth.load().RequestsFailed
	if err := unhookOutbound(client.netns); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	e := nodeagent.CheckEnrollment(pods, "/proc", time.Now())
	if e.Error != "" || len(e.Pods) != 2 {
		t.Fatalf("enrollment %+v", e)
	}
	for _, p := range e.Pods {
		switch role := strings.TrimPrefix(p.Name, prefix+"-"); {
		// One of the two streams may be between its end and its successor
		// (the 100 ms gap) when the check runs.
		case role == "cli" && (p.Result != wire.NotEnrolled || p.Failed != wire.CheckBypass ||
			!bypassDetail.MatchString(p.Detail)):
			t.Errorf("pod cli: %s, want not enrolled on bypass, its streams straight to the peer", p)
		case role == "srv" && p.Result != wire.Enrolled:
			t.Errorf("pod srv: %s, want enrolled", p)
		}
	}
	if tr := client.truth.load(); tr.RequestsFailed != failedBefore || tr.Streams < 4 {
		t.Errorf("traffic %s: want no failed request since the fault (%d before) and the streams reopened", tr, failedBefore)
	}
}
