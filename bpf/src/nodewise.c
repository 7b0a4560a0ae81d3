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

// Everything counted for one side of one namespace. Its fields, in order,
// are the rows of counter_rows (below): field F of a key with block B is
// element B of row F.
#define F_RESETS_SENT 0
#define F_RESETS_RECEIVED 1
#define F_CONNECTS 2
#define F_ACCEPTS 3
#define F_RETRANSMITS 4
#define F_CONNECT_FAILURES 5
#define F_CONNECT_LATENCY (F_CONNECT_FAILURES + FAIL_CLASSES)
#define F_SRTT (F_CONNECT_LATENCY + HIST_BUCKETS)
#define FIELDS (F_SRTT + HIST_BUCKETS)

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

// One slot of the socket table: a socket that reached ESTABLISHED, until
// it leaves that state, or a connect whose SYN was retransmitted, from the
// retransmit on.
struct sock_slot {
	__u64 sk;             // socket address; 0 when the slot is free
	__u64 connect_ns;     // a retransmitted connect's first SYN; else 0
	__u64 established_ns; // when it reached ESTABLISHED; 0 before
	__u32 netns;
	__u8 side;
	__u8 pad;
	__u16 block;  // its key's counter block + 1; 0 if the key has none
};

// Force the generated Go types.
const struct counter_key *unused_counter_key __attribute__((unused));
const struct sock_counters *unused_sock_counters __attribute__((unused));
const struct sock_slot *unused_sock_slot __attribute__((unused));

// Counters live in rows, one per field and CPU: counter_rows holds, for
// each CPU, FIELDS rows of counter_blocks_n counters (row cpu × FIELDS +
// field), and counter_index gives each (namespace, side) its block, its
// column in every row, the first time it counts something. A CPU writes
// only its own rows, as with a per-CPU map. An event bumps one counter in
// the row of its field, so the rows an event type touches are shared by
// every namespace: under the churn of a hundred namespaces they stay in
// cache, where a struct of every field per key (592 bytes, 10 cache lines)
// was a cache miss per event (measured: 20 ns a run less on the same
// churn). The map is mmapable, so the agent reads the columns in use
// straight from memory (a per-CPU map is read by a system call copying
// every row of every CPU whole: 1.2 MB a snapshot on two CPUs).
// Blocks are never reassigned, so a small cache of key → block
// (block_cache) spares the hot path the hash. The loader sizes the rows to
// the CPU count (a few MiB at most); when blocks run out, further keys
// count in the per-CPU hash `counters` of whole structs, allocated on
// demand (BPF_F_NO_PREALLOC: a key is inserted once per namespace and
// side, and preallocating per-CPU values for every possible key would cost
// tens of MiB on a many-core node). The agent sums both.
#define COUNTER_BLOCKS 1024 // the most; the loader may set fewer

const volatile __u32 counter_blocks_n = COUNTER_BLOCKS;

struct counter_row {
	__u64 block[COUNTER_BLOCKS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, FIELDS); // × the possible CPUs, set by the loader
	__type(key, __u32);
	__type(value, struct counter_row);
} counter_rows SEC(".maps");

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

// The cache of key → block: 4-way set-associative, so the keys of a busy
// node do not evict each other as they would in a direct-mapped cache of
// the same size. An entry is netns << 32 | side << 31 | block + 1, and 0
// when empty (no namespace has inode 0). It is shared by all CPUs: a
// mapping never changes once made, an entry is one aligned 8-byte store,
// and a race between two CPUs filling a set at once can only drop or
// repeat an entry (a later miss), never pair a key with another's block.
// At 16 KiB the kernel allocates it from the linear map, where huge pages
// cover it (a per-CPU value lives in 4 KiB vmalloc'ed pages, whose TLB
// misses cost a two-dimensional page walk on a VM: measured 7 % of a run
// for the two caches under the churn).
#define BLOCK_CACHE_SETS 512
#define BLOCK_CACHE_WAYS 4

struct block_cache {
	__u64 way[BLOCK_CACHE_SETS * BLOCK_CACHE_WAYS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct block_cache);
} block_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct counter_key);
	__type(value, struct sock_counters);
} counters SEC(".maps");

// The socket table: open addressing in plain arrays, keyed by socket
// address, in two levels. A socket's slots are the SOCK_PROBES slots from
// hash(address) in the near table, then as many in the far one; claiming
// one is a compare-and-swap, finding one reads at most 2 × SOCK_PROBES
// slots, and freeing one is three stores. Array lookups are inlined by the
// verifier: no hashing helper, no bucket lock, no allocation on the
// connection path (a hash insert and delete cost ~150 ns each on a busy
// host; socket-local storage allocates twice per socket).
//
// The near table is small enough (30 KiB) for the kernel to allocate it
// from the linear map, which huge pages cover; the far one (4 MiB) is
// vmalloc'ed in 4 KiB pages, whose TLB misses walk both the guest's and
// the host's page tables on a VM: under a 50-namespace churn that made the
// table the costliest part of a run (measured: 30 ns a run less with the
// near table). The far table holds the sockets the near one has no room
// for, on nodes with many open connections.
//
// Established sockets and connects that retransmitted their SYN live
// here; the agent reads the established ones' ages at snapshot time, the
// far table through a read-only mapping.
#define NEAR_SLOTS 960
#define SOCK_SLOTS (1 << 17)
#define SOCK_SLOT_BITS 17
#define SOCK_PROBES 8
// A SYN_SENT slot older than this belongs to a socket that went away
// without a transition the programs see (the kernel gives up on a
// connect after about two minutes): claiming may reuse it.
#define STALE_CONNECT_NS (600ULL * 1000000000ULL)

// The near table is one value, so the agent reads it whole with one
// lookup (a batch lookup of its slots cost 200 µs a snapshot).
struct near_table {
	struct sock_slot slot[NEAR_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct near_table);
} near_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, SOCK_SLOTS);
	__type(key, __u32);
	__type(value, struct sock_slot);
} sock_slots SEC(".maps");

// Set once a socket has taken a slot in the far table: until then the
// agent skips reading it (4 MiB a snapshot).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} far_used SEC(".maps");

// Sockets that reached ESTABLISHED and found no free slot: they are
// missing from the age buckets.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} established_overflow SEC(".maps");

// The cgroups (v2 ids) that made application sockets in each network
// namespace: how the agent finds the pod of a namespace without reading
// other processes' /proc/<pid>/ns links (which would need CAP_SYS_PTRACE).
// Keyed by both, since a namespace also sees visitors (CNI plugins,
// probes) whose cgroups are not the pod's; user space picks.
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

// The cgroups each counter block last recorded as owners of its
// namespace: an app opening connection after connection returns after
// comparing its socket's cgroup id with its block's, with no helper call,
// hash or map lookup. Cgroup ids are never reused, so a new pod whose
// namespace gets a dead pod's inode (and block) differs from it and is
// recorded at its first socket. Two ways a block, for a namespace that
// also sees a visitor; a block's ways are written by any CPU, and a race
// can only cost a later map lookup. A key that counts in the hash, with
// no block, looks the map up every time.
#define OWNER_WAYS 2

struct block_owners {
	__u64 id[COUNTER_BLOCKS * OWNER_WAYS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct block_owners);
} block_owners SEC(".maps");

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

// block_for returns the block of a key, giving the key one if it has none
// and blocks are left; else -1.
static __always_inline __s64 block_for(struct counter_key *key)
{
	__u32 zero = 0, *next, *found, b;

	found = bpf_map_lookup_elem(&counter_index, key);
	if (found)
		return *found;
	next = bpf_map_lookup_elem(&next_block, &zero);
	if (!next)
		return -1;
	// Out of blocks: no atomic on a shared line for every event of the
	// keys that count in the hash.
	if (*next >= counter_blocks_n)
		return -1;
	b = __sync_fetch_and_add(next, 1);
	if (b >= counter_blocks_n)
		return -1;
	// Another CPU may have given the key a block meanwhile: then this
	// one stays unused, and the key counts in that one.
	if (bpf_map_update_elem(&counter_index, key, &b, BPF_NOEXIST)) {
		found = bpf_map_lookup_elem(&counter_index, key);
		if (!found)
			return -1;
		b = *found;
	}
	return b;
}

// A key's counter reference: its block + 1, REF_SPILL for a key that
// counts in the hash, 0 for nowhere.
#define REF_SPILL 0xFFFFFFFF

// counter_ref finds where a key counts.
static __always_inline __u32 counter_ref(__u32 netns, __u32 side)
{
	struct counter_key key = { .netns = netns, .side = side };
	__u64 tag = (__u64)netns << 1 | side, e;
	struct block_cache *bc;
	__u32 zero = 0, set;
	__s64 b;
	__u64 *w;

	bc = bpf_map_lookup_elem(&block_cache, &zero);
	if (!bc)
		return 0;
	set = (__u32)((tag * 0x9E3779B97F4A7C15ULL) >> 55) & (BLOCK_CACHE_SETS - 1);
	w = &bc->way[set * BLOCK_CACHE_WAYS];
	for (int i = 0; i < BLOCK_CACHE_WAYS; i++) {
		e = w[i];
		if (e && e >> 31 == tag)
			return (__u32)(e & 0x7FFFFFFF);
	}
	b = block_for(&key);
	if (b < 0)
		return REF_SPILL;
	// Newest first; the oldest way drops out.
	w[3] = w[2];
	w[2] = w[1];
	w[1] = w[0];
	w[0] = tag << 31 | (__u64)(b + 1);
	return b + 1;
}

// count adds one to a field of a key, given its reference.
static __always_inline void count(__u32 ref, __u32 netns, __u32 side, __u32 field)
{
	struct counter_key key = { .netns = netns, .side = side };
	struct sock_counters *c;
	__u64 *row;
	__u32 b, idx;

	if (field >= FIELDS || !ref)
		return;
	if (ref != REF_SPILL) {
		b = ref - 1;
		// Tracing programs run with migration disabled: the CPU
		// stays the same for the run.
		idx = bpf_get_smp_processor_id() * FIELDS + field;
		row = bpf_map_lookup_elem(&counter_rows, &idx);
		if (row && b < counter_blocks_n)
			row[b] += 1;
		return;
	}
	c = bpf_map_lookup_elem(&counters, &key);
	if (!c) {
		bpf_map_update_elem(&counters, &key, &zero_counters, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&counters, &key);
		if (!c)
			return;
	}
	((__u64 *)c)[field] += 1;
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

static __always_inline void srtt_sample(const struct sock *sk, __u32 ref, __u32 netns, __u32 side)
{
	const struct tcp_sock *tp = as_tcp_sock(sk);
	__u32 srtt;

	if (!tp)
		return;
	srtt = tp->srtt_us >> 3;
	if (srtt)
		count(ref, netns, side, F_SRTT + (log2_bucket(srtt) & (HIST_BUCKETS - 1)));
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
	count(counter_ref(netns, side), netns, side, F_RESETS_SENT);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(tcp_receive_reset, struct sock *sk)
{
	__u32 netns = sk_netns(sk), side = sk_side(sk);

	count(counter_ref(netns, side), netns, side, F_RESETS_RECEIVED);
	return 0;
}

// note_owner records, as an owner of an app socket's namespace, the cgroup
// of the process that made the socket: the kernel keeps that cgroup (v2)
// on every full socket for cgroup BPF (sk_cgrp_data, set at creation from
// the creating task; an accepted socket inherits its listener's). It reads
// the socket, never "current", so it runs where the counting does, in
// softirq as well, and the transitions that only a system call makes
// (connect, close) need no program work at all: reading the task's
// namespace and cgroups there cost 70 ns a connect in cache misses under
// the benchmark's churn. Callers pass only app sockets: ztunnel's are
// never evidence (it marks every socket it makes in a pod, its DNS proxy's
// too, so they are side=proxy). A visitor from another pod (an agent that
// opens sockets in many pods) leaves its cgroup in many namespaces; user
// space sets such visitors aside.
static __always_inline void note_owner(const struct sock *sk, __u32 netns, __u32 ref)
{
	struct netns_owner key = {};
	const struct cgroup *cgrp;
	struct block_owners *bo;
	__u32 zero = 0, b;
	__u64 id, *w;
	__u8 one = 1;

	// Linux 5.15 and later; before, the cgroup shares a word with flags.
	if (!bpf_core_field_exists(sk->sk_cgrp_data.cgroup))
		return;
	cgrp = sk->sk_cgrp_data.cgroup;
	if (!cgrp)
		return;
	id = cgrp->kn->id;
	w = NULL;
	if (ref && ref != REF_SPILL && ref <= COUNTER_BLOCKS) {
		// The mask bounds the index for the verifier.
		b = (ref - 1) & (COUNTER_BLOCKS - 1);
		bo = bpf_map_lookup_elem(&block_owners, &zero);
		if (bo) {
			w = &bo->id[b * OWNER_WAYS];
			if (w[0] == id || w[1] == id)
				return;
		}
	}
	key.netns = netns;
	key.cgroup = id;
	if (!bpf_map_lookup_elem(&netns_owners, &key))
		bpf_map_update_elem(&netns_owners, &key, &one, BPF_ANY);
	if (w) {
		w[1] = w[0];
		w[0] = id;
	}
}

// near_hash places a socket in the near table.
static __always_inline __u32 near_hash(__u64 sk)
{
	return (__u32)((((sk >> 6) * 0x9E3779B97F4A7C15ULL) >> 32) * NEAR_SLOTS >> 32);
}

// far_hash places a socket in the far table. Sockets come from slabs of
// 32 KiB (13 TCP sockets each): all the sockets of one 32 KiB region of
// addresses go to one block of 512 slots (16 KiB of table, 4 pages), in
// address order, rotated by an amount drawn for the region. The table pages
// the programs touch then follow the few slabs in use rather than one page
// per socket, so few TLB entries cover them, while Fibonacci hashing of
// the region still spreads regions over the blocks and the rotations spread
// the sockets of regions that share a block.
#define SLOT_BLOCK_BITS 9
static __always_inline __u32 far_hash(__u64 sk)
{
	__u64 h = (sk >> 15) * 0x9E3779B97F4A7C15ULL;
	__u32 block = (__u32)(h >> (64 - (SOCK_SLOT_BITS - SLOT_BLOCK_BITS)));
	__u32 rot = (__u32)(h >> 23);

	return (block << SLOT_BLOCK_BITS) |
	       (((__u32)(sk >> 6) + rot) & ((1 << SLOT_BLOCK_BITS) - 1));
}

// slot_at returns slot idx of the near table, given, or else of the far.
static __always_inline struct sock_slot *slot_at(struct near_table *near, __u32 idx)
{
	if (near)
		return idx < NEAR_SLOTS ? &near->slot[idx] : NULL;
	return bpf_map_lookup_elem(&sock_slots, &idx);
}

// probe_find returns the socket's slot among the probes from h in the near
// table (given) or the far one, of n slots, or NULL.
static __always_inline struct sock_slot *probe_find(struct near_table *near, __u32 n, __u32 h, __u64 sk)
{
	for (__u32 i = 0; i < SOCK_PROBES; i++) {
		__u32 idx = h + i;
		struct sock_slot *s;

		if (idx >= n)
			idx -= n;
		s = slot_at(near, idx);
		if (s && s->sk == sk)
			return s;
	}
	return NULL;
}

// probe_claim takes a free (or stale) slot for the socket among the probes
// from h in the near table (given) or the far one, of n slots, or returns
// NULL when they all hold other live sockets.
static __always_inline struct sock_slot *probe_claim(struct near_table *near, __u32 n, __u32 h, __u64 sk, __u64 now)
{
	for (__u32 i = 0; i < SOCK_PROBES; i++) {
		__u32 idx = h + i;
		struct sock_slot *s;
		__u64 cur;

		if (idx >= n)
			idx -= n;
		s = slot_at(near, idx);
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

// slot_find returns the socket's slot, or NULL.
static __always_inline struct sock_slot *slot_find(__u64 sk)
{
	struct near_table *near;
	struct sock_slot *s;
	__u32 zero = 0;

	near = bpf_map_lookup_elem(&near_slots, &zero);
	if (near) {
		s = probe_find(near, NEAR_SLOTS, near_hash(sk), sk);
		if (s)
			return s;
	}
	return probe_find(NULL, SOCK_SLOTS, far_hash(sk), sk);
}

// slot_claim takes a slot for a socket that has none.
static __always_inline struct sock_slot *slot_claim(__u64 sk, __u64 now)
{
	struct near_table *near;
	struct sock_slot *s;
	__u32 zero = 0, *used;

	near = bpf_map_lookup_elem(&near_slots, &zero);
	if (near) {
		s = probe_claim(near, NEAR_SLOTS, near_hash(sk), sk, now);
		if (s)
			return s;
	}
	s = probe_claim(NULL, SOCK_SLOTS, far_hash(sk), sk, now);
	if (s) {
		used = bpf_map_lookup_elem(&far_used, &zero);
		if (used && !*used)
			*used = 1;
	}
	return s;
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

// syn_start is when a connect whose SYN is being retransmitted sent its
// first SYN: the kernel keeps that SYN's timestamp in retrans_stamp, in
// the units of its TCP timestamps (milliseconds of the monotonic clock, or
// microseconds on connections that negotiated them), truncated to 32 bits.
// 0 if unknown.
static __always_inline __u64 syn_start(const struct tcp_sock *tp, __u64 now)
{
	__u32 stamp = tp->retrans_stamp, unit = 1000000;

	if (!stamp)
		return 0;
	if (bpf_core_field_exists(tp->tcp_usec_ts) && BPF_CORE_READ_BITFIELD(tp, tcp_usec_ts))
		unit = 1000;
	return now - (__u64)((__u32)(now / unit) - stamp) * unit;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, const struct sock *sk)
{
	__u32 netns = sk_netns(sk), side = sk_side(sk);

	count(counter_ref(netns, side), netns, side, F_RETRANSMITS);
	// A connect's SYN retransmitted: its latency now includes the
	// timeouts, which the RTT sample it will end with does not. The
	// socket gets a slot holding the first SYN's time (on the first
	// retransmit; later ones find the slot).
	if (sk->__sk_common.skc_state == TCP_SYN_SENT) {
		__u64 key = (__u64)sk - (__u64)&sock_slots, now, start;
		const struct tcp_sock *tp = as_tcp_sock(sk);
		struct sock_slot *st;

		if (!tp || slot_find(key))
			return 0;
		now = bpf_ktime_get_ns();
		start = syn_start(tp, now);
		if (!start)
			return 0;
		st = slot_claim(key, now);
		if (st) {
			st->established_ns = 0;
			st->connect_ns = start;
		}
	}
	return 0;
}

// set_state is the body of the inet_sock_set_state program (below).
static __always_inline int set_state(const struct sock *sk, const int oldstate, const int newstate)
{
	// The socket as a number the table can hash: the verifier lets a
	// pointer be subtracted from a pointer (giving a scalar) but not be
	// multiplied. The map's address is a constant, so this identifies the
	// socket as well as its address does.
	__u64 key = (__u64)sk - (__u64)&sock_slots;
	const struct tcp_sock *tp;
	struct sock_slot *st;
	__u32 netns, side, ref;
	__u64 now, start, lat;

	// Each case reads only the socket fields it needs, and transitions
	// that matter to nobody here (SYN_SENT, LAST_ACK, FIN_WAIT2,
	// TIME_WAIT, CLOSE after a FIN, CLOSE → SYN_RECV…) leave before
	// touching the socket.
	if (oldstate == TCP_ESTABLISHED) {
		if (sk->sk_protocol != IPPROTO_TCP)
			return 0;
		// Leaving ESTABLISHED: one SRTT sample per connection, and it
		// no longer counts towards the age buckets. The slot says
		// whose socket it is and where it counts.
		st = slot_find(key);
		ref = 0;
		if (st) {
			netns = st->netns;
			side = st->side;
			ref = st->block;
			slot_free(st);
		} else {
			// Established before the agent started, or found no
			// slot: its owner may be unknown yet.
			netns = sk_netns(sk);
			side = sk_side(sk);
		}
		if (!ref)
			ref = counter_ref(netns, side);
		if (!st && side == SIDE_APP)
			note_owner(sk, netns, ref);
		srtt_sample(sk, ref, netns, side);
		return 0;
	}

	switch (newstate) {
	case TCP_LISTEN:
		// A server's first sign of life.
		if (sk->sk_protocol == IPPROTO_TCP && sk_side(sk) == SIDE_APP) {
			__u32 ns = sk_netns(sk);

			note_owner(sk, ns, counter_ref(ns, SIDE_APP));
		}
		return 0;
	case TCP_ESTABLISHED:
		if (sk->sk_protocol != IPPROTO_TCP)
			return 0;
		break;
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
	ref = counter_ref(netns, side);
	if (side == SIDE_APP)
		note_owner(sk, netns, ref);
	// Only a connect whose SYN was retransmitted has a slot already.
	st = NULL;
	start = 0;
	if (oldstate == TCP_SYN_SENT && tp->total_retrans) {
		st = slot_find(key);
		if (st)
			start = st->connect_ns;
	}
	// Should a path to ESTABLISHED not have refreshed the socket's
	// clock, read the clock.
	if (now <= start)
		now = bpf_ktime_get_ns();
	if (!st)
		st = slot_claim(key, now);
	if (st) {
		st->connect_ns = 0;
		st->netns = netns;
		st->side = side;
		// A spilled key's reference does not fit: it is found again.
		st->block = ref == REF_SPILL ? 0 : ref;
		st->established_ns = now;
	} else {
		count_overflow();
	}
	if (oldstate == TCP_SYN_RECV) {
		count(ref, netns, side, F_ACCEPTS);
		return 0;
	}
	if (oldstate != TCP_SYN_SENT)
		return 0;
	count(ref, netns, side, F_CONNECTS);
	// The connect latency: from the first SYN for a connect that
	// retransmitted it, else the handshake's round trip, the socket's
	// first RTT sample (SYN sent → SYN-ACK received), which the kernel
	// took just before this transition.
	if (start)
		lat = (now - start) / 1000;
	else if (tp->srtt_us)
		lat = tp->srtt_us >> 3;
	else
		return 0;
	count(ref, netns, side, F_CONNECT_LATENCY + (log2_bucket(lat) & (HIST_BUCKETS - 1)));
	return 0;

failed_connect:
	// SYN_SENT → CLOSE: a failed connect, unless the caller gave up
	// before any error (sk_err 0). Only a connect that retransmitted its
	// SYN has a slot to free.
	{
		int err = sk->sk_err;

		tp = as_tcp_sock(sk);
		if (tp && tp->total_retrans) {
			st = slot_find(key);
			if (st)
				slot_free(st);
		}
		if (err) {
			netns = sk_netns(sk);
			side = sk_side(sk);
			ref = counter_ref(netns, side);
			if (side == SIDE_APP)
				note_owner(sk, netns, ref);
			count(ref, netns, side, F_CONNECT_FAILURES + failure_class(err));
		}
	}
	return 0;
}

#ifdef NODEWISE_RUNPROF
// The timed build (bpf2go's NodewiseRunprof object, for the benchmarks
// only): each run of the state program files its own duration, read with
// bpf_ktime_get_ns at entry and exit, into a histogram, because the
// kernel's run-time statistics give only a mean. An empty program timed
// the same way measures what the timing itself adds.
#define RUNPROF_FINE 1024 // 2 ns buckets up to 2,048 ns, then log2
#define RUNPROF_BUCKETS (RUNPROF_FINE + 64)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RUNPROF_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} run_ns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RUNPROF_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} empty_run_ns SEC(".maps");

static __always_inline void runprof_record(void *hist, __u64 t0)
{
	__u64 d = bpf_ktime_get_ns() - t0, *n;
	__u32 b;

	if (d < RUNPROF_FINE * 2)
		b = d >> 1;
	else
		b = RUNPROF_FINE + log2_bucket(d);
	if (b >= RUNPROF_BUCKETS)
		b = RUNPROF_BUCKETS - 1;
	n = bpf_map_lookup_elem(hist, &b);
	if (n)
		*n += 1;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	__u64 t0 = bpf_ktime_get_ns();

	set_state(sk, oldstate, newstate);
	runprof_record(&run_ns, t0);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(empty_timed)
{
	__u64 t0 = bpf_ktime_get_ns();

	runprof_record(&empty_run_ns, t0);
	return 0;
}

// The accounting floor of make bench-ebpf: a program that only counts
// (one per-CPU counter, the least any counting program does), attached
// to the same hook beside the real ones, its run time read from the
// kernel's statistics as theirs is.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} floor_runs SEC(".maps");

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(count_only)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&floor_runs, &zero);

	if (n)
		*n += 1;
	return 0;
}
#else
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	return set_state(sk, oldstate, newstate);
}
#endif
