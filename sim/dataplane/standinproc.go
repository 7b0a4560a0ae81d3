package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// standinProc is one ztunnel stand-in process, driven over its stdin.
type standinProc struct {
	node, pod string
	// connected orders the stand-ins by when they connected to the node's
	// istio-cni stand-in (they connect at start): higher is newer.
	connected int
	cmd       *exec.Cmd
	exited    chan struct{}

	mu          sync.Mutex // serialises commands
	stdin       io.WriteCloser
	stdout      *bufio.Reader
	terminating bool
}

// startStandin starts a stand-in process and waits until it is ready.
func startStandin(argv, env []string, logTo io.Writer, node, pod string) (*standinProc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), StandinEnv+"=1"), env...)
	cmd.Stderr = logTo
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the ztunnel stand-in for %s: %w", pod, err)
	}
	p := &standinProc{node: node, pod: pod, cmd: cmd, exited: make(chan struct{}), stdin: stdin, stdout: bufio.NewReader(out)}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	line, err := p.stdout.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		p.kill()
		return nil, fmt.Errorf("ztunnel stand-in for %s did not get ready: %q %v", pod, line, err)
	}
	return p, nil
}

// command sends one command and reads its answer.
func (p *standinProc) command(verb, netns string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintf(p.stdin, "%s %s\n", verb, netns); err != nil {
		return fmt.Errorf("ztunnel stand-in %s: %w", p.pod, err)
	}
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		return fmt.Errorf("ztunnel stand-in %s: %w", p.pod, err)
	}
	if line = strings.TrimSpace(line); line != "ok "+netns {
		return fmt.Errorf("ztunnel stand-in %s: %s", p.pod, line)
	}
	return nil
}

// terminate sends SIGTERM and waits for the drain; when ctx ends first
// (the grace period), it kills the process.
func (p *standinProc) terminate(ctx context.Context) {
	p.mu.Lock()
	p.terminating = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.kill()
	}
}

func (p *standinProc) isTerminating() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.terminating
}

// kill sends SIGKILL (by PID, to our own child) and waits for it to exit.
func (p *standinProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}
