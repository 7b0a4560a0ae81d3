// Package bench holds the timed build of the agent's eBPF programs, for
// benchmarks only: the same source (../src/nodewise.c) compiled with
// NODEWISE_RUNPROF, whose state program files each run's duration into a
// histogram, plus an empty program timed the same way. The production
// package bpf does not carry it; the generated objects are committed, so
// building needs no clang.
package bench

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -DNODEWISE_RUNPROF" -target bpfel NodewiseRunprof ../src/nodewise.c -- -I../src
