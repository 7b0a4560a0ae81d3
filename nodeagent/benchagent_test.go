package nodeagent

// The node agent as its own process for the benchmarks: this test binary
// re-executed (see TestMain), so its CPU and memory are its own.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const benchAgentEnv = "NODEWISE_BENCH_AGENT"

// benchAgentConfig is what the parent benchmark hands the agent process.
type benchAgentConfig struct {
	Cert, Key, Token string
	Pods             map[uint32]Pod
}

// runBenchAgentIfChild runs this test binary as a node agent process when
// the benchmark started it that way, so its CPU and memory are its own.
func runBenchAgentIfChild() {
	raw := os.Getenv(benchAgentEnv)
	if raw == "" {
		return
	}
	var c benchAgentConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, "bench agent:", err)
		os.Exit(1)
	}
	a, err := New(Config{
		Node: "bench", Mode: ModeEBPF, ListenAddr: "127.0.0.1:0",
		CertFile: c.Cert, KeyFile: c.Key, TokenFile: c.Token,
		Resolver: NewStaticResolver(c.Pods),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench agent:", err)
		os.Exit(1)
	}
	// On SIGUSR1, say the CPU spent so far (the parent times a phase);
	// on SIGTERM, say it before shutting down: the parent counts what the
	// agent spends serving, not closing.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGUSR1)
	go func() {
		for s := range sig {
			if s == syscall.SIGUSR1 {
				fmt.Println("cpu", selfCPU().Nanoseconds())
				continue
			}
			fmt.Println("stopping", selfCPU().Nanoseconds())
			cancel()
			return
		}
	}()
	go func() {
		addr, err := a.Addr(ctx)
		if err == nil {
			// The CPU spent so far (loading the programs): the parent
			// counts only what the agent spends after.
			fmt.Println("ready", addr, selfCPU().Nanoseconds())
		}
	}()
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// selfCPU returns this process's user+system CPU time, to the microsecond.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procPeakRSS returns VmHWM in bytes.
func procPeakRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM")
}

// agentProcess is the agent running as its own process for one B phase.
type agentProcess struct {
	cmd      *exec.Cmd
	out      *bufio.Reader
	ra       *runningAgent
	readyCPU time.Duration
}

func startAgentProcess(b *testing.B, files tlsFiles, pods map[uint32]Pod) *agentProcess {
	b.Helper()
	cfg, err := json.Marshal(benchAgentConfig{Cert: files.cert, Key: files.key, Token: files.token, Pods: pods})
	if err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), benchAgentEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	var addr string
	var readyCPU int64
	if err == nil {
		_, err = fmt.Sscanf(line, "ready %s %d", &addr, &readyCPU)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("agent process: %q %v", line, err)
	}
	return &agentProcess{cmd: cmd, out: r, readyCPU: time.Duration(readyCPU),
		ra: &runningAgent{url: "https://" + addr, files: files, client: newTestClient(files)}}
}

// cpu returns the CPU the agent has spent serving so far: its rusage (to
// the microsecond) now, less what it had spent loading when it was ready.
func (a *agentProcess) cpu() (time.Duration, error) {
	return a.askCPU(syscall.SIGUSR1, "cpu")
}

// stop ends the agent and returns the CPU it spent serving, as cpu does,
// up to the stop signal.
func (a *agentProcess) stop() time.Duration {
	cpu, err := a.askCPU(syscall.SIGTERM, "stopping")
	_ = a.cmd.Wait()
	if err != nil {
		return 0
	}
	return cpu
}

// askCPU signals the agent and reads the CPU figure it answers with.
func (a *agentProcess) askCPU(sig syscall.Signal, word string) (time.Duration, error) {
	if err := a.cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("signalling the agent process: %w", err)
	}
	var ns int64
	line, err := a.out.ReadString('\n')
	if err == nil {
		_, err = fmt.Sscanf(line, word+" %d", &ns)
	}
	if err != nil {
		return 0, fmt.Errorf("reading the agent's CPU (%q): %w", line, err)
	}
	return time.Duration(ns) - a.readyCPU, nil
}
