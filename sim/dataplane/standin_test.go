package dataplane

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nodewise/nodewise/test/testkit"
)

// twoPods builds a fabric with a server pod and an ambient client pod whose
// traffic a stand-in process (grace seconds, image tag) proxies.
func twoPods(t *testing.T, grace, tag string, traffic Traffic) (client *app, proc *standinProc) {
	t.Helper()
	testkit.RequireNetns(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{StandinArgv: []string{exe, "-test.run=^$"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
		if left := listNetns(d.prefix); len(left) > 0 {
			t.Errorf("namespaces left behind: %v", left)
		}
	})
	proc, err = startStandin(d.cfg.StandinArgv, []string{graceEnv + "=" + grace, tagEnv + "=" + tag}, os.Stderr, "n1", "ztunnel")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.kill)
	srv := &podSandbox{netns: d.prefix + "-srv", leg: "vs", ip: "198.18.1.2", ambient: true}
	cli := &podSandbox{netns: d.prefix + "-cli", leg: "vc", ip: "198.18.0.2", ambient: true}
	d.cfg.Traffic = traffic
	d.cfg.Traffic.defaults()
	target := func(string) string { return srv.ip }
	for _, sb := range []*podSandbox{srv, cli} {
		if err := addNetns(sb.netns); err != nil {
			t.Fatal(err)
		}
		if err := d.fab.attach(sb.netns, sb.leg, sb.ip); err != nil {
			t.Fatal(err)
		}
		if err := installRedirect(sb.netns); err != nil {
			t.Fatal(err)
		}
		if err := proc.command("add", sb.netns); err != nil {
			t.Fatal(err)
		}
		a, err := startApp(sb.netns, sb.ip, sb == cli, d.cfg.Traffic, nil, target, nil)
		if err != nil {
			t.Fatal(err)
		}
		sb.app = a
		t.Cleanup(func() { a.stop(context.Background()) })
	}
	return cli.app, proc
}

// TestStandinResetsAtDrainDeadline: after SIGTERM the stand-in keeps
// established streams until grace − 1 s (grace ≤ 10 s), then resets them;
// the client sees resets only of streams at least that old.
func TestStandinResetsAtDrainDeadline(t *testing.T) {
	client, proc := twoPods(t, "3", "1.28.1", Traffic{Streams: 3, StreamLife: time.Minute, StreamGap: 100 * time.Millisecond})
	time.Sleep(time.Second)
	before := client.truth.load()
	if before.Streams != 3 || before.Requests == 0 || before.RequestsFailed != 0 {
		t.Fatalf("before SIGTERM: %s; want 3 streams and requests without failures", before)
	}
	start := time.Now()
	proc.terminate(context.Background())
	took := time.Since(start)
	time.Sleep(200 * time.Millisecond)
	after := client.truth.load()
	t.Logf("stand-in exited %s after SIGTERM; client saw %s; reset ages %v", took, after, after.ResetAges())
	if after.StreamsReset < 3 {
		t.Errorf("%d streams reset; want the 3 open at SIGTERM reset at the deadline", after.StreamsReset)
	}
	if m := after.MinResetAge(); m < 2*time.Second {
		t.Errorf("a stream %s old was reset; the deadline is 2 s after SIGTERM", m)
	}
}

// TestStandinExitsWhenIdle: with no connection to keep, the stand-in exits
// at once on SIGTERM instead of waiting for its deadline.
func TestStandinExitsWhenIdle(t *testing.T) {
	testkit.RequireNetns(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := startStandin([]string{exe, "-test.run=^$"}, []string{graceEnv + "=30"}, os.Stderr, "n1", "ztunnel")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	proc.terminate(ctx)
	if ctx.Err() != nil {
		t.Fatalf("idle stand-in still running 20 s after SIGTERM (deadline 25 s): it waits for nothing")
	}
}

func TestDrainDeadline(t *testing.T) {
	for _, c := range []struct {
		grace time.Duration
		known bool
		want  time.Duration
	}{
		{30 * time.Second, true, 25 * time.Second},
		{11 * time.Second, true, 6 * time.Second},
		{10 * time.Second, true, 9 * time.Second},
		{6 * time.Second, true, 5 * time.Second},
		{0, false, 5 * time.Second},
	} {
		if got := DrainDeadline(c.grace, c.known); got != c.want {
			t.Errorf("DrainDeadline(%s, %v) = %s, want %s", c.grace, c.known, got, c.want)
		}
	}
}
