// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// nodewise socket counters. Every program aggregates in the kernel, keyed by
// the socket's network namespace inode (never the current task: most of these
// hooks run in softirq) and by side (ztunnel's own sockets or the app's).
// Nothing is streamed to user space: the agent reads the maps when asked.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define SIDE_APP 0
#define SIDE_PROXY 1

#define ZTUNNEL_MARK 1337

#define HIST_CONNECT_LATENCY 0
#define HIST_SRTT 1
#define HIST_BUCKETS 32

#define FAIL_REFUSED 0
#define FAIL_TIMEOUT 1
#define FAIL_UNREACHABLE 2
#define FAIL_RESET 3
#define FAIL_OTHER 4
#define FAIL_CLASSES 5

#define ECONNRESET 104
#define ENETUNREACH 101
#define ETIMEDOUT 110
#define ECONNREFUSED 111
#define EHOSTUNREACH 113

struct counter_key {
	__u32 netns;
	__u32 side;
};

struct sock_counters {
	__u64 resets_sent;
	__u64 resets_received;
	__u64 connects;
	__u64 accepts;
	__u64 retransmits;
	__u64 connect_failures[FAIL_CLASSES];
};

struct hist_key {
	__u32 netns;
	__u8 side;
	__u8 kind;
	__u8 bucket;
	__u8 pad;
};

struct conn_start {
	__u64 start_ns;
	__u32 netns;
	__u32 side;
};

// Force the generated Go types.
const struct counter_key *unused_counter_key __attribute__((unused));
const struct sock_counters *unused_sock_counters __attribute__((unused));
const struct hist_key *unused_hist_key __attribute__((unused));
const struct conn_start *unused_established __attribute__((unused));

// The per-CPU hashes are allocated on demand (BPF_F_NO_PREALLOC): a key
// is inserted once per namespace and side, and preallocating per-CPU values
// for every possible key would cost tens of MiB on a many-core node.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct counter_key);
	__type(value, struct sock_counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct hist_key);
	__type(value, __u64);
} histograms SEC(".maps");

// Connect start times of sockets in SYN_SENT, by socket address. Per-CPU
// LRU lists: no shared lock on the connect path; a socket that never
// reaches ESTABLISHED or CLOSE simply ages out.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} connect_start SEC(".maps");

// Established sockets, by socket address: the agent computes age buckets
// from it at snapshot time.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, __u64);
	__type(value, struct conn_start);
} established_socks SEC(".maps");

// Entries the established map could not take because it was full.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} established_overflow SEC(".maps");

// The cgroups (v2 ids) of application processes seen acting on sockets in
// their own network namespace: how the agent finds the pod of a namespace
// without reading other processes' /proc/<pid>/ns links (which would need
// CAP_SYS_PTRACE). Keyed by both, since a namespace also sees visitors
// (CNI plugins, probes) whose cgroups are not the pod's; user space picks.
struct netns_owner {
	__u32 netns;
	__u32 pad;
	__u64 cgroup;
};

const struct netns_owner *unused_netns_owner __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct netns_owner);
	__type(value, __u8);
} netns_owners SEC(".maps");

// The last owner each CPU recorded: a repeat (the common case: one app
// opening connection after connection) skips the hash.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct netns_owner);
} last_owner SEC(".maps");

static __always_inline int is_ztunnel_port(__u16 port)
{
	return port == 15001 || port == 15006 || port == 15008;
}

// The hooks get BTF-typed pointers, so fields are read directly (CO-RE
// relocated loads, no helper calls): this runs on every TCP state change.
static __always_inline __u32 sk_netns(const struct sock *sk)
{
	return sk->__sk_common.skc_net.net->ns.inum;
}

// sk_side reads the mark only from full sockets: time-wait and request
// sockets share sock_common but have no sk_mark.
static __always_inline __u32 sk_side(const struct sock *sk)
{
	__u8 state = sk->__sk_common.skc_state;

	if (is_ztunnel_port(sk->__sk_common.skc_num))
		return SIDE_PROXY;
	if (state != TCP_TIME_WAIT && state != TCP_NEW_SYN_RECV && sk->sk_mark == ZTUNNEL_MARK)
		return SIDE_PROXY;
	return SIDE_APP;
}

static __always_inline struct sock_counters *counters_for(__u32 netns, __u32 side)
{
	struct counter_key key = { .netns = netns, .side = side };
	struct sock_counters *c = bpf_map_lookup_elem(&counters, &key);

	if (c)
		return c;
	struct sock_counters zero = {};
	bpf_map_update_elem(&counters, &key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&counters, &key);
}

static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 r = 0, shift;

	if (v < 2)
		return 0;
	shift = (v > 0xFFFFFFFF) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	if (r >= HIST_BUCKETS)
		r = HIST_BUCKETS - 1;
	return r;
}

static __always_inline void hist_add(__u32 netns, __u32 side, __u8 kind, __u64 us)
{
	struct hist_key key = {
		.netns = netns,
		.side = side,
		.kind = kind,
		.bucket = log2_bucket(us),
	};
	__u64 *v = bpf_map_lookup_elem(&histograms, &key);

	if (v) {
		*v += 1;
		return;
	}
	__u64 one = 1;
	if (bpf_map_update_elem(&histograms, &key, &one, BPF_NOEXIST) != 0) {
		v = bpf_map_lookup_elem(&histograms, &key);
		if (v)
			*v += 1;
	}
}

static __always_inline void srtt_sample(const struct sock *sk, __u32 netns, __u32 side)
{
	const struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);
	__u32 srtt;

	if (!tp)
		return;
	srtt = tp->srtt_us >> 3;
	if (srtt)
		hist_add(netns, side, HIST_SRTT, srtt);
}

static __always_inline __u32 failure_class(int err)
{
	switch (err) {
	case ECONNREFUSED:
		return FAIL_REFUSED;
	case ETIMEDOUT:
		return FAIL_TIMEOUT;
	case EHOSTUNREACH:
	case ENETUNREACH:
		return FAIL_UNREACHABLE;
	case ECONNRESET:
		return FAIL_RESET;
	default:
		return FAIL_OTHER;
	}
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(tcp_send_reset, const struct sock *sk, const struct sk_buff *skb)
{
	__u32 netns, side;

	if (sk) {
		netns = sk_netns(sk);
		side = sk_side(sk);
	} else {
		// A reset for a segment no socket owns: the namespace is the
		// receiving device's, the side comes from the destination port.
		struct tcphdr *th;
		__u16 dport;

		if (!skb)
			return 0;
		netns = BPF_CORE_READ(skb, dev, nd_net.net, ns.inum);
		th = (struct tcphdr *)(BPF_CORE_READ(skb, head) + BPF_CORE_READ(skb, transport_header));
		dport = bpf_ntohs(BPF_CORE_READ(th, dest));
		side = is_ztunnel_port(dport) ? SIDE_PROXY : SIDE_APP;
	}
	if (!netns)
		return 0;
	struct sock_counters *c = counters_for(netns, side);
	if (c)
		c->resets_sent++;
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(tcp_receive_reset, struct sock *sk)
{
	struct sock_counters *c = counters_for(sk_netns(sk), sk_side(sk));

	if (c)
		c->resets_received++;
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, const struct sock *sk)
{
	struct sock_counters *c = counters_for(sk_netns(sk), sk_side(sk));

	if (c)
		c->retransmits++;
	return 0;
}

// note_owner records the current task's cgroup for the socket's namespace.
// Call it only on transitions made by a system call (connect, listen,
// close, shutdown), never in softirq where "current" is unrelated. Tasks
// outside the namespace (ztunnel entering pods to open its sockets) and
// ztunnel's own sockets are skipped.
static __always_inline void note_owner(__u32 netns, __u32 side)
{
	struct task_struct *task;
	struct netns_owner key = {};
	__u8 one = 1;

	if (side != SIDE_APP)
		return;
	task = bpf_get_current_task_btf();
	if (task->nsproxy->net_ns->ns.inum != netns)
		return;
	key.netns = netns;
	key.cgroup = bpf_get_current_cgroup_id();
	__u32 zero = 0;
	struct netns_owner *last = bpf_map_lookup_elem(&last_owner, &zero);
	if (last && last->netns == key.netns && last->cgroup == key.cgroup)
		return;
	if (last)
		*last = key;
	if (bpf_map_lookup_elem(&netns_owners, &key))
		return;
	bpf_map_update_elem(&netns_owners, &key, &one, BPF_ANY);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	__u64 key = (__u64)sk;
	__u64 now, *start;
	__u32 netns, side;

	// Most transitions (FIN_WAIT*, TIME_WAIT, LAST_ACK, SYN_RECV…) matter
	// to nobody here: leave before touching the socket.
	if (newstate != TCP_SYN_SENT && newstate != TCP_ESTABLISHED &&
	    oldstate != TCP_ESTABLISHED && newstate != TCP_LISTEN && newstate != TCP_LAST_ACK &&
	    !(newstate == TCP_CLOSE && oldstate == TCP_SYN_SENT))
		return 0;
	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;

	netns = sk_netns(sk);
	side = sk_side(sk);

	// connect(), listen() and close() run in the owner's context.
	if (newstate == TCP_SYN_SENT || newstate == TCP_LISTEN || newstate == TCP_LAST_ACK ||
	    newstate == TCP_FIN_WAIT1)
		note_owner(netns, side);
	if (newstate == TCP_LISTEN || newstate == TCP_LAST_ACK)
		return 0;

	if (newstate == TCP_SYN_SENT) {
		now = bpf_ktime_get_ns();
		bpf_map_update_elem(&connect_start, &key, &now, BPF_ANY);
		return 0;
	}

	if (newstate == TCP_ESTABLISHED) {
		struct conn_start e = {};
		struct sock_counters *c;

		now = bpf_ktime_get_ns();
		e.start_ns = now;
		e.netns = netns;
		e.side = side;
		if (bpf_map_update_elem(&established_socks, &key, &e, BPF_ANY) != 0) {
			__u32 zero = 0;
			__u64 *o = bpf_map_lookup_elem(&established_overflow, &zero);
			if (o)
				*o += 1;
		}
		if (oldstate == TCP_SYN_RECV) {
			c = counters_for(netns, side);
			if (c)
				c->accepts++;
			return 0;
		}
		if (oldstate != TCP_SYN_SENT)
			return 0;
		start = bpf_map_lookup_elem(&connect_start, &key);
		if (!start)
			return 0;
		__u64 us = (now - *start) / 1000;
		bpf_map_delete_elem(&connect_start, &key);
		c = counters_for(netns, side);
		if (c)
			c->connects++;
		hist_add(netns, side, HIST_CONNECT_LATENCY, us);
		return 0;
	}

	if (oldstate == TCP_ESTABLISHED) {
		// Leaving ESTABLISHED: one SRTT sample per connection, and it
		// no longer counts towards the age buckets.
		srtt_sample(sk, netns, side);
		bpf_map_delete_elem(&established_socks, &key);
		return 0;
	}

	// SYN_SENT → CLOSE: a failed connect, unless the caller gave up
	// before any error (sk_err 0).
	int err = sk->sk_err;

	bpf_map_delete_elem(&connect_start, &key);
	if (err) {
		struct sock_counters *c = counters_for(netns, side);
		__u32 cls = failure_class(err);

		if (c && cls < FAIL_CLASSES)
			c->connect_failures[cls]++;
	}
	return 0;
}
