package netrig

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ZtunnelMark is the SO_MARK ztunnel puts on its sockets in pod namespaces.
const ZtunnelMark = 1337

// ZtunnelPorts are the ports the stand-in listens on in each pod namespace.
var ZtunnelPorts = []int{15001, 15006, 15008}

const (
	standinEnv = "NODEWISE_NETRIG_STANDIN"
	// AppPort is where an app process (StartApp) serves plain echo.
	AppPort = 8080
)

// RunStandinIfChild turns the current process into the ztunnel stand-in
// when the rig started it (call it first thing in TestMain). It never
// returns in that case.
func RunStandinIfChild() {
	var err error
	switch os.Getenv(standinEnv) {
	case "1":
		err = standinMain()
	case "app":
		err = appMain()
	default:
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "standin: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// markedListenConfig sets SO_REUSEPORT and SO_MARK 1337 on the listener, as
// ztunnel's in-pod listeners do (accepted sockets inherit the mark).
var markedListenConfig = net.ListenConfig{
	Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
				return
			}
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, ZtunnelMark)
		})
		if err != nil {
			return err
		}
		return serr
	},
}

// standinMain echoes on the ztunnel ports until killed.
func standinMain() error {
	for _, port := range ZtunnelPorts {
		l, err := markedListenConfig.Listen(context.Background(), "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			return err
		}
		go serveEcho(l)
	}
	fmt.Println("ready")
	select {}
}

// appMain is a plain application: an unmarked echo server on AppPort.
func appMain() error {
	l, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", AppPort))
	if err != nil {
		return err
	}
	go serveEcho(l)
	fmt.Println("ready")
	select {}
}

func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// StartStandin starts the ztunnel stand-in in the pod namespace (a copy of
// the test binary, see RunStandinIfChild) and waits until it listens.
func (p *Pod) StartStandin() { p.start("1", "") }

// StartApp starts an application process (an unmarked echo server on
// AppPort) in the pod namespace, inside the cgroup v2 directory cgroupDir
// as the kubelet would put a pod's container (or in the test's own cgroup
// when cgroupDir is empty). It is killed at cleanup.
func (p *Pod) StartApp(cgroupDir string) { p.start("app", cgroupDir) }

func (p *Pod) start(role, cgroupDir string) {
	t := p.rig.t
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", p.Name, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), standinEnv+"="+role)
	cmd.Stderr = os.Stderr
	if cgroupDir != "" {
		dir, err := os.Open(cgroupDir)
		if err != nil {
			t.Fatalf("opening cgroup %s: %v", cgroupDir, err)
		}
		defer dir.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the stand-in in %s: %v", p.Name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("%s process in %s did not get ready: %q %v", role, p.Name, line, err)
	}
	if role == "1" {
		p.mu.Lock()
		p.standin = cmd
		p.mu.Unlock()
	}
}

// KillStandin sends SIGKILL to the stand-in and waits for it to die: the
// kernel then closes all its sockets, as when ztunnel is killed.
func (p *Pod) KillStandin() {
	t := p.rig.t
	t.Helper()
	p.mu.Lock()
	cmd := p.standin
	p.standin = nil
	p.mu.Unlock()
	if cmd == nil {
		t.Fatalf("no stand-in running in %s", p.Name)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 stand-in: %v", err)
	}
	_ = cmd.Wait()
}

// ListenEcho starts an echo server inside the namespace, in this process,
// on port (marked like ztunnel's when marked is set). It is closed by the
// test's cleanup. Benchmarks use it instead of 50 stand-in processes.
func (n *Netns) ListenEcho(t interface {
	Helper()
	Fatalf(string, ...any)
	Cleanup(func())
}, port int, marked bool) {
	t.Helper()
	var l net.Listener
	err := n.Do(func() error {
		lc := net.ListenConfig{}
		if marked {
			lc = markedListenConfig
		}
		var err error
		l, err = lc.Listen(context.Background(), "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	if err != nil {
		t.Fatalf("echo server in %s: %v", n.Name, err)
	}
	go serveEcho(l)
	t.Cleanup(func() { l.Close() })
}

// StandinPID is the stand-in's process ID (0 when none runs): the process
// whose sockets are the pod's ztunnel listeners.
func (p *Pod) StandinPID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.standin == nil {
		return 0
	}
	return p.standin.Process.Pid
}
