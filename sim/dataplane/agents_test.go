package dataplane

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/wire"
)

// TestAgentsSeeOnlyTheirNodesPods: one real node agent per simulated node,
// read over HTTPS with the test CA and the token as the orchestrator reads
// them, reports exactly the app pods of its own node, and its eBPF counters
// attribute each ambient pod's traffic to that pod. Closing the agents
// closes their ports.
func TestAgentsSeeOnlyTheirNodesPods(t *testing.T) {
	e := newLiveEnv(t, 3, Traffic{})
	l, err := net.Listen("tcp", net.JoinHostPort(e.c.Nodes[0].IP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var nodes []AgentNode
	ips := map[string]string{}
	for _, n := range e.c.Nodes {
		nodes = append(nodes, AgentNode{Name: n.Name, IP: n.IP})
		ips[n.Name] = n.IP
	}
	ctx := context.Background()
	agents, err := e.dp.StartAgents(ctx, AgentsConfig{Nodes: nodes, Port: port, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = agents.Close()
		}
	})
	client, err := remote.NewAgent(remote.AgentConfig{CAFile: agents.CAFile, TokenFile: agents.TokenFile,
		URLFor: func(_ context.Context, node string) (string, error) {
			return "https://" + net.JoinHostPort(ips[node], strconv.Itoa(port)), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	read := func() map[string]wire.Snapshot {
		out := map[string]wire.Snapshot{}
		for _, n := range e.c.Nodes {
			s, err := client.Snapshot(ctx, n.Name)
			if err != nil {
				t.Fatalf("agent of %s over HTTPS: %v", n.Name, err)
			}
			out[n.Name] = s
		}
		return out
	}
	before := read()
	time.Sleep(3 * time.Second)
	after := read()

	ambient := map[string]bool{}
	for _, n := range e.c.Nodes {
		want, err := e.dp.Resolver(n.Name).Pods()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, p := range want {
			names[p.Namespace+"/"+p.Name] = true
		}
		got := map[string]bool{}
		for _, p := range after[n.Name].Pods {
			got[p.Namespace+"/"+p.Name] = true
		}
		if len(got) != len(names) {
			t.Errorf("agent of %s reports %d pods, its node runs %d: %v", n.Name, len(got), len(names), got)
		}
		for k := range got {
			if !names[k] {
				t.Errorf("agent of %s reports %s, which runs on another node", n.Name, k)
			}
		}
		// Every ambient pod's short requests (one connection each, every
		// 200 ms) show up as its app side's connects.
		w, err := health.NewWindow(before[n.Name], after[n.Name])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range w.Pods {
			amb, err := e.dp.isAmbient(ctx, p.Namespace)
			if err != nil {
				t.Fatal(err)
			}
			if !amb || p.Side != wire.SideApp || p.Appeared {
				continue
			}
			ambient[p.Namespace+"/"+p.Name] = true
			if p.Counts.Connects < 5 {
				t.Errorf("agent of %s: ambient pod %s made %d connects in 3 s; its client makes about 15", n.Name, p.PodKey, p.Counts.Connects)
			}
		}
	}
	if len(ambient) == 0 {
		t.Fatalf("no ambient pod measured: the check above proved nothing")
	}
	closed = true
	if err := agents.Close(); err != nil {
		t.Errorf("closing the agents: %v", err)
	}
	for _, n := range e.c.Nodes {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(n.IP, strconv.Itoa(port)), time.Second); err == nil {
			c.Close()
			t.Errorf("agent of %s still listens after Close", n.Name)
		}
	}
}
