package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one component the cluster started. Its full argument vector is
// recorded so that Down can tell our process from an unrelated one that later
// reused the PID: it signals a PID only while /proc/PID/cmdline still matches.
type process struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Argv []string `json:"argv"`
	Log  string   `json:"log"`

	cmd *exec.Cmd // set only in the process that started it
}

// startProcess starts argv with its output appended to logPath. A detached
// process gets its own session, so it outlives the CLI that started it and a
// Ctrl-C in that terminal does not reach it; an attached one dies with its
// parent.
func startProcess(name string, argv []string, logPath string, detach bool) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{Name: name, PID: cmd.Process.Pid, Argv: argv, Log: logPath, cmd: cmd}
	if !detach {
		go func() { _ = cmd.Wait() }() // reap, so a dead child is not a zombie
	}
	return p, nil
}

// alive reports whether PID still runs the command this process recorded.
func (p *process) alive() bool {
	if p.PID <= 0 {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil || len(cmdline) == 0 { // gone, or a zombie (empty cmdline)
		return false
	}
	want := strings.Join(p.Argv, "\x00") + "\x00"
	return bytes.Equal(cmdline, []byte(want))
}

// signal sends sig to the process if, and only if, it is still ours.
func (p *process) signal(sig syscall.Signal) error {
	if !p.alive() {
		return errNotRunning
	}
	return syscall.Kill(p.PID, sig)
}

var errNotRunning = errors.New("process is not running")

// stop sends SIGTERM, waits up to grace, then SIGKILLs. It never touches a
// PID whose command line is not the one recorded.
func (p *process) stop(grace time.Duration) {
	if p.signal(syscall.SIGTERM) != nil {
		return
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = p.signal(syscall.SIGKILL)
	for i := 0; i < 100 && p.alive(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
}

// writePIDFile records the PID as DIR/pids/NAME.pid for people and scripts.
func writePIDFile(stateDir string, p *process) error {
	dir := filepath.Join(stateDir, "pids")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, p.Name+".pid"), []byte(fmt.Sprintf("%d\n", p.PID)), 0o644)
}

// exitedErr says that the process died, with the last lines of its log.
func (p *process) exitedErr() error {
	return fmt.Errorf("%s exited during start-up; last lines of %s:\n%s", p.Name, p.Log, tail(p.Log, 5))
}
