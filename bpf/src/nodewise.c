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

// Everything counted for one side of one namespace, in one per-CPU value:
// an event looks up its key once and updates fields in place.
struct sock_counters {
	__u64 resets_sent;
	__u64 resets_received;
	__u64 connects;
	__u64 accepts;
	__u64 retransmits;
	__u64 connect_failures[FAIL_CLASSES];
	__u64 connect_latency[HIST_BUCKETS];
	__u64 srtt[HIST_BUCKETS];
};

// One slot of the socket table: a socket the programs saw enter SYN_SENT
// or reach ESTABLISHED, until it leaves that state.
struct sock_slot {
	__u64 sk;             // socket address; 0 when the slot is free
	__u64 connect_ns;     // when it entered SYN_SENT; 0 if not seen connecting
	__u64 established_ns; // when it reached ESTABLISHED; 0 before
	__u32 netns;
	__u32 side;
};

// Force the generated Go types.
const struct counter_key *unused_counter_key __attribute__((unused));
const struct sock_counters *unused_sock_counters __attribute__((unused));
const struct sock_slot *unused_sock_slot __attribute__((unused));

// Counters live in per-CPU blocks: counter_blocks is a per-CPU array of
// them, and counter_index gives each (namespace, side) its block the first
// time it counts something. Blocks are never reassigned, so each CPU keeps
// a small direct-mapped cache of key → block (block_cache) that the hot
// path reads instead of hashing: an inlined array read, where a lookup in
// a hash of 16,384 buckets cost a hash, a bucket walk and, on a busy
// host, TLB misses. The loader sizes the blocks to the CPU count (preallocated
// per CPU: a few MiB at most); when they run out, further keys count in
// the per-CPU hash `counters`, allocated on demand (BPF_F_NO_PREALLOC: a
// key is inserted once per namespace and side, and preallocating per-CPU
// values for every possible key would cost tens of MiB on a many-core
// node). The agent sums both.
#define COUNTER_BLOCKS 1024 // the loader may lower it

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_BLOCKS);
	__type(key, __u32);
	__type(value, struct sock_counters);
} counter_blocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, COUNTER_BLOCKS);
	__type(key, struct counter_key);
	__type(value, __u32);
} counter_index SEC(".maps");

// The next block to hand out.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} next_block SEC(".maps");

// One entry of a CPU's cache of key → block; side_plus1 is 0 in an
// empty entry.
struct block_cache_entry {
	__u32 netns;
	__u32 side_plus1;
	__u32 block;
	__u32 pad;
};

#define BLOCK_CACHE_BITS 8

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << BLOCK_CACHE_BITS);
	__type(key, __u32);
	__type(value, struct block_cache_entry);
} block_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct counter_key);
	__type(value, struct sock_counters);
} counters SEC(".maps");

// The socket table: an open-addressing table in a plain array, keyed by
// socket address. A socket's slots are the SOCK_PROBES slots from
// hash(address); claiming one is a compare-and-swap, finding one reads at
// most SOCK_PROBES slots, and freeing one is two stores. Array lookups are
// inlined by the verifier: no hashing helper, no bucket lock, no
// allocation on the connection path (a hash insert and delete cost ~150 ns
// each on a busy host; socket-local storage allocates twice per socket).
// Connect start times and established sockets both live here; the agent
// reads the established ones' ages from a read-only mapping of the array
// at snapshot time.
#define SOCK_SLOTS (1 << 17)
#define SOCK_SLOT_BITS 17
#define SOCK_PROBES 8
// A SYN_SENT slot older than this belongs to a socket that went away
// without a transition the programs see (the kernel gives up on a
// connect after about two minutes): claiming may reuse it.
#define STALE_CONNECT_NS (600ULL * 1000000000ULL)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, SOCK_SLOTS);
	__type(key, __u32);
	__type(value, struct sock_slot);
} sock_slots SEC(".maps");

// Sockets that reached ESTABLISHED and found no free slot: they are
// missing from the age buckets.
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

// The last owner each CPU recorded, and the css_set (the task's set of
// cgroups, shared by tasks with the same memberships and replaced when a
// task moves) it came from: the same css_set again in the same namespace
// (the common case: an app opening connection after connection) returns
// before reading the socket's side, the namespace's inode or the cgroup,
// and the same cgroup again skips the hash.
struct last_owner {
	__u64 cset; // the css_set's address as a number
	__u64 net;  // the struct net's address as a number
	__u32 netns;
	__u32 pad;
	__u64 cgroup;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last_owner);
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

// A zero value to insert a new key from (too big for the BPF stack).
static const struct sock_counters zero_counters;

// block_for returns the block of a key (and its number in *block), giving
// the key one if it has none and blocks are left; else NULL.
static __always_inline struct sock_counters *block_for(struct counter_key *key, __u32 *block)
{
	struct sock_counters *c;
	__u32 zero = 0, *next, *found, b;

	found = bpf_map_lookup_elem(&counter_index, key);
	if (found) {
		b = *found;
		*block = b;
		return bpf_map_lookup_elem(&counter_blocks, &b);
	}
	next = bpf_map_lookup_elem(&next_block, &zero);
	if (!next)
		return NULL;
	// Out of blocks: no atomic on a shared line for every event of the
	// keys that count in the hash.
	b = *next;
	if (!bpf_map_lookup_elem(&counter_blocks, &b))
		return NULL;
	b = __sync_fetch_and_add(next, 1);
	c = bpf_map_lookup_elem(&counter_blocks, &b);
	if (!c)
		return NULL;
	// Another CPU may have given the key a block meanwhile: then this
	// one stays unused, and the key counts in that one.
	if (bpf_map_update_elem(&counter_index, key, &b, BPF_NOEXIST)) {
		found = bpf_map_lookup_elem(&counter_index, key);
		if (!found)
			return NULL;
		b = *found;
		c = bpf_map_lookup_elem(&counter_blocks, &b);
	}
	*block = b;
	return c;
}

static __always_inline struct sock_counters *counters_for(__u32 netns, __u32 side)
{
	struct counter_key key = { .netns = netns, .side = side };
	struct block_cache_entry *e;
	struct sock_counters *c;
	__u32 slot, block = 0;

	slot = (__u32)((((__u64)netns << 1 | side) * 0x9E3779B97F4A7C15ULL) >> (64 - BLOCK_CACHE_BITS));
	e = bpf_map_lookup_elem(&block_cache, &slot);
	if (!e)
		return NULL;
	if (e->netns == netns && e->side_plus1 == side + 1)
		return bpf_map_lookup_elem(&counter_blocks, &e->block);
	c = block_for(&key, &block);
	if (c) {
		e->netns = netns;
		e->side_plus1 = side + 1;
		e->block = block;
		return c;
	}
	c = bpf_map_lookup_elem(&counters, &key);
	if (c)
		return c;
	bpf_map_update_elem(&counters, &key, &zero_counters, BPF_NOEXIST);
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

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

// as_tcp_sock gives the TCP fields of a full TCP socket: through the
// bpf_rdonly_cast kfunc where the kernel has it (Linux 6.2 and later; the
// verifier turns it into nothing), else through the bpf_skc_to_tcp_sock
// helper (a call per use). The loader zeroes the address of a missing weak
// kfunc, and the verifier drops the branch that would call it.
static __always_inline const struct tcp_sock *as_tcp_sock(const struct sock *sk)
{
	if (bpf_rdonly_cast)
		return bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct tcp_sock));
	return bpf_skc_to_tcp_sock((void *)sk);
}

static __always_inline void srtt_sample(const struct sock *sk, struct sock_counters *c)
{
	const struct tcp_sock *tp = as_tcp_sock(sk);
	__u32 srtt;

	if (!tp)
		return;
	srtt = tp->srtt_us >> 3;
	if (srtt)
		c->srtt[log2_bucket(srtt) & (HIST_BUCKETS - 1)]++;
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
static __always_inline void note_owner(const struct sock *sk)
{
	const struct net *net = sk->__sk_common.skc_net.net;
	struct task_struct *task;
	struct netns_owner key = {};
	struct last_owner *last;
	__u64 cset, netp;
	__u32 zero = 0;
	__u8 one = 1;

	task = bpf_get_current_task_btf();
	// The same namespace is the same struct net.
	if (task->nsproxy->net_ns != net)
		return;
	last = bpf_map_lookup_elem(&last_owner, &zero);
	if (!last)
		return;
	// Pointer minus pointer is a number to the verifier.
	cset = (__u64)task->cgroups - (__u64)&last_owner;
	netp = (__u64)net - (__u64)&last_owner;
	if (last->cset == cset && last->net == netp)
		return;
	if (sk_side(sk) != SIDE_APP)
		return;
	key.netns = net->ns.inum;
	key.cgroup = bpf_get_current_cgroup_id();
	last->cset = cset;
	last->net = netp;
	if (last->netns == key.netns && last->cgroup == key.cgroup)
		return;
	last->netns = key.netns;
	last->cgroup = key.cgroup;
	if (bpf_map_lookup_elem(&netns_owners, &key))
		return;
	bpf_map_update_elem(&netns_owners, &key, &one, BPF_ANY);
}

// slot_hash places a socket in the table. Sockets come from slabs of
// 32 KiB (13 TCP sockets each): all the sockets of one 32 KiB region of
// addresses go to one block of 512 slots (16 KiB of table, 4 pages), in
// address order, rotated by an amount drawn for the region. The table pages
// the programs touch then follow the few slabs in use rather than one page
// per socket, so few TLB entries cover them (a TLB miss walks both the
// guest's and the host's page tables on a VM), while Fibonacci hashing of
// the region still spreads regions over the blocks and the rotations spread
// the sockets of regions that share a block.
#define SLOT_BLOCK_BITS 9
static __always_inline __u32 slot_hash(__u64 sk)
{
	__u64 h = (sk >> 15) * 0x9E3779B97F4A7C15ULL;
	__u32 block = (__u32)(h >> (64 - (SOCK_SLOT_BITS - SLOT_BLOCK_BITS)));
	__u32 rot = (__u32)(h >> 23);

	return (block << SLOT_BLOCK_BITS) |
	       (((__u32)(sk >> 6) + rot) & ((1 << SLOT_BLOCK_BITS) - 1));
}

// slot_find returns the socket's slot, or NULL.
static __always_inline struct sock_slot *slot_find(__u64 sk)
{
	__u32 h = slot_hash(sk);

	for (__u32 i = 0; i < SOCK_PROBES; i++) {
		__u32 idx = (h + i) & (SOCK_SLOTS - 1);
		struct sock_slot *s = bpf_map_lookup_elem(&sock_slots, &idx);

		if (s && s->sk == sk)
			return s;
	}
	return NULL;
}

// slot_claim takes a free (or stale) slot for the socket, or returns NULL
// when all of its slots hold other live sockets.
static __always_inline struct sock_slot *slot_claim(__u64 sk, __u64 now)
{
	__u32 h = slot_hash(sk);

	for (__u32 i = 0; i < SOCK_PROBES; i++) {
		__u32 idx = (h + i) & (SOCK_SLOTS - 1);
		struct sock_slot *s = bpf_map_lookup_elem(&sock_slots, &idx);
		__u64 cur;

		if (!s)
			continue;
		cur = s->sk;
		if (cur == sk)
			return s;
		if (cur && !(s->established_ns == 0 && s->connect_ns &&
			     now - s->connect_ns > STALE_CONNECT_NS))
			continue;
		if (__sync_val_compare_and_swap(&s->sk, cur, sk) == cur)
			return s;
	}
	return NULL;
}

// slot_free releases a slot: the times first, so a reader that sees the
// address never pairs it with a stale time.
static __always_inline void slot_free(struct sock_slot *s)
{
	s->established_ns = 0;
	s->connect_ns = 0;
	__sync_lock_test_and_set(&s->sk, 0);
}

static __always_inline void count_overflow(void)
{
	__u32 zero = 0;
	__u64 *o = bpf_map_lookup_elem(&established_overflow, &zero);

	if (o)
		*o += 1;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	// The socket as a number the table can hash: the verifier lets a
	// pointer be subtracted from a pointer (giving a scalar) but not be
	// multiplied. The map's address is a constant, so this identifies the
	// socket as well as its address does.
	__u64 key = (__u64)sk - (__u64)&sock_slots;
	const struct tcp_sock *tp;
	struct sock_counters *c;
	struct sock_slot *st;
	__u32 netns, side;
	__u64 now, start;

	// Each case reads only the socket fields it needs, and transitions
	// that matter to nobody here (FIN_WAIT2, TIME_WAIT, CLOSE after a FIN,
	// CLOSE → SYN_RECV…) leave before touching the socket.
	if (oldstate == TCP_ESTABLISHED) {
		if (sk->sk_protocol != IPPROTO_TCP)
			return 0;
		// Leaving ESTABLISHED: one SRTT sample per connection, and it
		// no longer counts towards the age buckets. The slot says
		// whose socket it is.
		st = slot_find(key);
		start = 0;
		if (st) {
			netns = st->netns;
			side = st->side;
			start = st->connect_ns;
			slot_free(st);
		} else {
			netns = sk_netns(sk);
			side = sk_side(sk);
		}
		// close() or shutdown() runs in the owner's context; a socket
		// seen connecting had its owner noted then.
		if (newstate == TCP_FIN_WAIT1 && !start)
			note_owner(sk);
		c = counters_for(netns, side);
		if (c)
			srtt_sample(sk, c);
		return 0;
	}

	switch (newstate) {
	case TCP_SYN_SENT:
		if (sk->sk_protocol != IPPROTO_TCP)
			return 0;
		// connect() runs in the owner's context.
		note_owner(sk);
		now = bpf_ktime_get_ns();
		st = slot_claim(key, now);
		if (st) {
			st->established_ns = 0;
			st->connect_ns = now;
		}
		return 0;
	case TCP_ESTABLISHED:
		if (sk->sk_protocol != IPPROTO_TCP)
			return 0;
		break;
	case TCP_LISTEN:
	case TCP_LAST_ACK:
		// listen() and close() run in the owner's context.
		if (sk->sk_protocol == IPPROTO_TCP)
			note_owner(sk);
		return 0;
	case TCP_CLOSE:
		if (oldstate == TCP_SYN_SENT && sk->sk_protocol == IPPROTO_TCP)
			goto failed_connect;
		return 0;
	default:
		return 0;
	}

	// Reaching ESTABLISHED. The kernel refreshed the socket's clock
	// (CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns) for the segment
	// that completes the handshake, just before this transition: reading
	// it spares a clock read.
	tp = as_tcp_sock(sk);
	if (!tp)
		return 0;
	now = tp->tcp_clock_cache;
	netns = sk_netns(sk);
	side = sk_side(sk);
	// A passive open's socket is new: it has no slot to find.
	st = oldstate == TCP_SYN_RECV ? NULL : slot_find(key);
	start = st ? st->connect_ns : 0;
	// Should a path to ESTABLISHED not have refreshed the socket's
	// clock, read the clock.
	if (now <= start)
		now = bpf_ktime_get_ns();
	if (!st) {
		st = slot_claim(key, now);
		if (st)
			st->connect_ns = 0;
	}
	if (st) {
		// A found slot keeps connect_ns: it marks a socket whose
		// connect() the programs saw (claiming skips established slots
		// whatever their connect_ns).
		st->netns = netns;
		st->side = side;
		st->established_ns = now;
	} else {
		count_overflow();
	}
	if (oldstate == TCP_SYN_RECV) {
		c = counters_for(netns, side);
		if (c)
			c->accepts++;
		return 0;
	}
	// A connect the programs saw start (not one already under way when
	// they were loaded).
	if (oldstate != TCP_SYN_SENT || !start)
		return 0;
	c = counters_for(netns, side);
	if (c) {
		c->connects++;
		c->connect_latency[log2_bucket((now - start) / 1000) & (HIST_BUCKETS - 1)]++;
	}
	return 0;

failed_connect:
	// SYN_SENT → CLOSE: a failed connect, unless the caller gave up
	// before any error (sk_err 0).
	{
		int err = sk->sk_err;

		st = slot_find(key);
		if (st)
			slot_free(st);
		if (err) {
			__u32 cls = failure_class(err);

			c = counters_for(sk_netns(sk), sk_side(sk));
			if (c && cls < FAIL_CLASSES)
				c->connect_failures[cls]++;
		}
	}
	return 0;
}
