package nodeagent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procDir is one process held by its open /proc/<pid> directory. Every read
// through it is of that process: the kernel ties the directory to the
// process and fails reads under it (ENOENT) once the process is gone, even
// when its PID has gone to another process since. A pidfd would hold the
// process the same way, but pidfd_open takes a PID of the caller's own PID
// namespace, and the agent runs without hostPID: the PIDs it reads are those
// of the host's /proc mounted at ProcRoot.
type procDir struct {
	pid int
	fd  int
}

// openProcDir holds the process that has PID pid under the proc root now.
func openProcDir(root string, pid int) (*procDir, error) {
	fd, err := unix.Open(filepath.Join(root, strconv.Itoa(pid)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(root, strconv.Itoa(pid)), Err: err}
	}
	return &procDir{pid: pid, fd: fd}, nil
}

func (d *procDir) Close() error { return unix.Close(d.fd) }

// openat opens name in the process's directory (ns/net, fd, ...).
func (d *procDir) openat(name string, flags int) (int, error) {
	fd, err := unix.Openat(d.fd, name, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: strconv.Itoa(d.pid) + "/" + name, Err: err}
	}
	return fd, nil
}

func (d *procDir) readFile(name string) ([]byte, error) {
	fd, err := d.openat(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return io.ReadAll(f)
}

// procID is what a process is known by between a scan and a later read:
// the pod whose cgroup it runs in and its start time. A PID alone may name
// another process by then.
type procID struct {
	uid   string
	start uint64
}

// errGone: the process read earlier is no longer running under its PID.
var errGone = errors.New("exited since it was found")

// identify reads the process's pod (from its cgroup) and start time, and
// whether it still runs (not a zombie).
func (d *procDir) identify() (procID, bool, error) {
	cg, err := d.readFile("cgroup")
	if err != nil {
		return procID{}, false, err
	}
	uid, _ := podUIDFromCgroup(string(cg))
	b, err := d.readFile("stat")
	if err != nil {
		return procID{}, false, err
	}
	start, alive, err := parseStat(d.pid, string(b))
	return procID{uid: uid, start: start}, alive, err
}

// is checks that the held process is the one id names, still running.
func (d *procDir) is(id procID) error {
	got, alive, err := d.identify()
	if err != nil || !alive || got != id {
		return fmt.Errorf("process %d of pod %s: %w", d.pid, id.uid, errGone)
	}
	return nil
}

// socketInodes are the inodes of the sockets the process holds open.
func (d *procDir) socketInodes() (map[uint64]bool, error) {
	fd, err := d.openat("fd", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	dir := os.NewFile(uintptr(fd), strconv.Itoa(d.pid)+"/fd")
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir.Name(), err)
	}
	out := map[uint64]bool{}
	buf := make([]byte, 64)
	for _, n := range names {
		l, err := unix.Readlinkat(fd, n, buf)
		if err != nil {
			continue // closed since the listing
		}
		if ino, ok := socketInode(string(buf[:l])); ok {
			out[ino] = true
		}
	}
	return out, nil
}

// socketInode parses an fd link "socket:[<inode>]".
func socketInode(link string) (uint64, bool) {
	if !strings.HasPrefix(link, "socket:[") || !strings.HasSuffix(link, "]") {
		return 0, false
	}
	ino, err := strconv.ParseUint(link[len("socket:["):len(link)-1], 10, 64)
	return ino, err == nil
}

// parseStat reads a process's start time (clock ticks after boot, field 22
// of /proc/<pid>/stat) and whether it still runs (not a zombie).
func parseStat(pid int, s string) (uint64, bool, error) {
	// The name in parentheses may hold spaces and parentheses: the fields
	// start after the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false, fmt.Errorf("%d/stat: no process name", pid)
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 20 { // state is field 3, starttime field 22
		return 0, false, fmt.Errorf("%d/stat: %d fields", pid, len(fs)+2)
	}
	start, err := strconv.ParseUint(fs[19], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%d/stat: start time %q", pid, fs[19])
	}
	return start, fs[0] != "Z" && fs[0] != "X", nil
}
