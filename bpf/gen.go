// Package bpf holds the agent's eBPF programs (src/nodewise.c, compiled CO-RE
// against the pinned src/vmlinux.h) and the bpf2go-generated Go bindings. The
// generated objects are committed, so building needs no clang.
package bpf

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type counter_key -type sock_counters -type sock_slot -type netns_owner -type near_table Nodewise src/nodewise.c -- -Isrc
