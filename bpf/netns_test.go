package bpf

import (
	"golang.org/x/sys/unix"
)

func netnsInode() (uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return 0, err
	}
	return uint32(st.Ino), nil
}
