package dataplane

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodewise/nodewise/probe"
)

// ProbeLabel and ProbeName are how the data plane recognises the pods of
// the nodewise-probe DaemonSet (deploy/probe): it runs the real probe in
// them instead of the rig's app.
const (
	ProbeLabel = "app.kubernetes.io/name"
	ProbeName  = "nodewise-probe"
)

func isProbePod(pod *corev1.Pod) bool { return pod.Labels[ProbeLabel] == ProbeName }

// probeRun is the probe (package probe) of one probe pod, running in the
// test process with its sockets in the pod's network namespace: it listens
// there, and dials from there, so its traffic crosses the node's ztunnel
// stand-in both ways, as an app pod's does.
type probeRun struct {
	p      *probe.Probe
	cancel context.CancelFunc
	done   chan struct{}
}

// probeArgs reads what the probe's command line sets (cmd/probe's --rate,
// --streams, --stream-every) from the pod's first container: the rate the
// DaemonSet asks for is the rate the rig runs.
func probeArgs(pod *corev1.Pod) (probe.Config, error) {
	var cfg probe.Config
	if len(pod.Spec.Containers) == 0 {
		return cfg, nil
	}
	for _, a := range pod.Spec.Containers[0].Args {
		name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok {
			continue
		}
		var err error
		switch name {
		case "rate":
			cfg.Rate, err = strconv.ParseFloat(val, 64)
		case "streams":
			cfg.Streams, err = strconv.Atoi(val)
		case "stream-every":
			cfg.StreamEvery, err = time.ParseDuration(val)
		}
		if err != nil {
			return cfg, fmt.Errorf("probe pod %s/%s: argument %q: %w", pod.Namespace, pod.Name, a, err)
		}
	}
	return cfg, nil
}

// startProbe runs the probe in the pod's namespace. Its peers are the other
// probe pods the data plane runs (what the headless Service resolves to),
// read every second so a new node's probe joins at once.
func (d *DataPlane) startProbe(sb *podSandbox, cfg probe.Config) (*probeRun, error) {
	cfg.Listen = fmt.Sprintf("0.0.0.0:%d", ProbePort)
	cfg.Self = net.JoinHostPort(sb.ip, strconv.Itoa(ProbePort))
	cfg.Peers = func(context.Context) ([]string, error) { return d.probePeers(), nil }
	cfg.PeersEvery = time.Second
	cfg.Logger = d.log.Named("probe").With(zap.String("pod", sb.key))
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(sb.netns, func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	var p *probe.Probe
	if err := inNetns(sb.netns, func() error {
		var err error
		p, err = probe.New(cfg)
		return err
	}); err != nil {
		return nil, fmt.Errorf("probe in %s: %w", sb.netns, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &probeRun{p: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = p.Run(ctx)
	}()
	return r, nil
}

// stop ends the probe and waits (up to ctx) for its connections to close.
func (r *probeRun) stop(ctx context.Context) {
	r.cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
	}
}

// probePeers are the addresses of every probe pod not stopping.
func (d *DataPlane) probePeers() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, sb := range d.pods {
		if sb.probe != nil && !sb.stopping {
			out = append(out, net.JoinHostPort(sb.ip, strconv.Itoa(ProbePort)))
		}
	}
	return out
}

// ProbeStats are the counters of the probe pod namespace/name, and whether
// the data plane runs it.
func (d *DataPlane) ProbeStats(key string) (probe.Stats, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, sb := range d.pods {
		if sb.key == key && sb.probe != nil {
			return sb.probe.p.Stats(), true
		}
	}
	return probe.Stats{}, false
}
