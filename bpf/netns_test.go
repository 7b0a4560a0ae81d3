package bpf

import (
	"golang.org/x/sys/unix"
)

// netnsInode returns the network namespace inode of the calling thread
// (not of the process's main thread, which a test that entered another
// namespace on it may have left there). Call it with the goroutine locked
// to its thread, and make the sockets from that goroutine.
func netnsInode() (uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, err
	}
	return uint32(st.Ino), nil
}
