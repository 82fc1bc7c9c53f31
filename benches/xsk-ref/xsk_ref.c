// SPDX-License-Identifier: MIT OR Apache-2.0
//
// xsk_ref: a C reference for `xtcp xsk-bench`, built on libxdp's <xdp/xsk.h>.
//
// One AF_XDP socket on one queue, copy mode, doing what the Rust tool's
// loops in cli/src/xsk_bench.rs do, so the two can be compared fairly:
//
//   txonly  The packet (Ethernet + IPv4 + TCP ACK + pattern payload, --size
//           bytes of frame without FCS) is written once into every UMEM
//           frame at start; frame i holds piece (i mod k) of the packet,
//           k = ceil(size / 4096). Above one frame a packet is a chain of k
//           descriptors, all but the last with XDP_PKT_CONTD (bound with
//           XDP_USE_SG). Each loop turn: read the clock, take up to
//           batch*k*2 completions, queue as many whole chains as fit (up to
//           --batch packets), and sendto() when the TX ring has
//           XDP_RING_NEED_WAKEUP set. At the end it keeps kicking for up to
//           200 ms until the ring drains, and counts completed packets.
//           The rate divides by the send loop's time (from after the
//           frames are written to the end of the loop), as xtcp does:
//           neither the start-up writes nor the drain are in it.
//           The socket option XDP_MAX_TX_SKB_BUDGET is set to the TX ring
//           size, as xtcp does (ignored where the kernel lacks it).
//
//   rxdrop  Fill ring primed full; each turn takes up to --batch RX
//           descriptors, counts them (a packet ends at a descriptor without
//           XDP_PKT_CONTD) and puts the frames back on the fill ring; when
//           nothing arrived and the fill ring needs a wakeup, recvfrom().
//           The XDP program is libxdp's default one, loaded by
//           xsk_socket__create: it redirects every packet of the queue to
//           the socket (xtcp's steering program matches the TCP port; on a
//           test link that only carries our packets this is the same work).
//           That program is not multi-buffer aware, so a veth whose MTU
//           needs more than one frame refuses it in native mode ("Peer MTU
//           is too large to set XDP"); use --xdp-skb there, which is not
//           comparable with xtcp's native steering. txonly is the reference
//           that matters; rxdrop is here for spot checks.
//
// Rates count frame bytes: Gbit/s = bytes * 8 / seconds / 1e9. Output is one
// JSON line. Build: cc -O2 -Wall -o xsk_ref xsk_ref.c -lxdp -lbpf
//
// Written from the libxdp xsk.h API and the kernel's AF_XDP documentation.

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <xdp/xsk.h>

// Newer than Debian 12's linux-libc-dev (6.1) in places.
#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)
#endif
#ifndef XDP_PKT_CONTD
#define XDP_PKT_CONTD (1 << 0)
#endif
#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#define XDP_MAX_TX_SKB_BUDGET_OPT 9 // Linux 6.17
#define XDP_HEADROOM_COPY 256      // copy-mode headroom in front of RX data

enum mode { MODE_TXONLY, MODE_RXDROP };

struct opts {
	const char *iface;
	unsigned queue;
	enum mode mode;
	unsigned frame_size, frames, ring, batch;
	unsigned size;
	double duration;
	bool need_wakeup;
	bool zerocopy;
	bool xdp_skb;
	int core;
	uint16_t port;
	struct in_addr src_ip, dst_ip;
	uint8_t dst_mac[6];
	bool have_src, have_dst, have_mac;
};

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static void die(const char *what, int err)
{
	fprintf(stderr, "xsk_ref: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: xsk_ref --iface IF --mode txonly|rxdrop [options]\n"
		"  --queue N          queue id (0)\n"
		"  --size B           txonly frame bytes without FCS, 60..65535 (64)\n"
		"  --dst-ip A --src-ip A --dst-mac M   txonly addressing\n"
		"  --port P           TCP destination port (5201)\n"
		"  --ring N           RX/TX ring entries; fill/completion get 2N (2048)\n"
		"  --batch N          packets per batch (64)\n"
		"  --frames N         UMEM frames (16384)\n"
		"  --frame-size B     2048 or 4096 (4096)\n"
		"  --duration S       seconds (10)\n"
		"  --wakeup need|busy need-wakeup (default) or kick every turn\n"
		"  --zerocopy         bind zero-copy instead of copy mode\n"
		"  --xdp-skb          rxdrop: attach libxdp's program in SKB (generic) mode\n"
		"  --core N           pin to CPU N\n");
	exit(2);
}

static bool parse_mac(const char *s, uint8_t m[6])
{
	unsigned v[6];
	if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
		return false;
	for (int i = 0; i < 6; i++) {
		if (v[i] > 255)
			return false;
		m[i] = (uint8_t)v[i];
	}
	return true;
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"iface", 1, 0, 'i'},  {"queue", 1, 0, 'q'},    {"mode", 1, 0, 'm'},
		{"size", 1, 0, 's'},   {"dst-ip", 1, 0, 'd'},   {"src-ip", 1, 0, 'S'},
		{"dst-mac", 1, 0, 'M'}, {"port", 1, 0, 'p'},    {"ring", 1, 0, 'r'},
		{"batch", 1, 0, 'b'},  {"frames", 1, 0, 'f'},   {"frame-size", 1, 0, 'F'},
		{"duration", 1, 0, 't'}, {"wakeup", 1, 0, 'w'}, {"zerocopy", 0, 0, 'z'}, {"xdp-skb", 0, 0, 'x'},
		{"core", 1, 0, 'c'},   {"help", 0, 0, 'h'},     {0, 0, 0, 0},
	};
	*o = (struct opts){.mode = MODE_RXDROP, .frame_size = 4096, .frames = 16384,
			   .ring = 2048, .batch = 64, .size = 64, .duration = 10,
			   .need_wakeup = true, .core = -1, .port = 5201};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'i': o->iface = optarg; break;
		case 'q': o->queue = strtoul(optarg, NULL, 0); break;
		case 'm':
			if (!strcmp(optarg, "txonly")) o->mode = MODE_TXONLY;
			else if (!strcmp(optarg, "rxdrop")) o->mode = MODE_RXDROP;
			else usage();
			break;
		case 's': o->size = strtoul(optarg, NULL, 0); break;
		case 'd': o->have_dst = inet_pton(AF_INET, optarg, &o->dst_ip) == 1; break;
		case 'S': o->have_src = inet_pton(AF_INET, optarg, &o->src_ip) == 1; break;
		case 'M': o->have_mac = parse_mac(optarg, o->dst_mac); break;
		case 'p': o->port = (uint16_t)strtoul(optarg, NULL, 0); break;
		case 'r': o->ring = strtoul(optarg, NULL, 0); break;
		case 'b': o->batch = strtoul(optarg, NULL, 0); break;
		case 'f': o->frames = strtoul(optarg, NULL, 0); break;
		case 'F': o->frame_size = strtoul(optarg, NULL, 0); break;
		case 't': o->duration = strtod(optarg, NULL); break;
		case 'w':
			if (!strcmp(optarg, "need")) o->need_wakeup = true;
			else if (!strcmp(optarg, "busy")) o->need_wakeup = false;
			else usage();
			break;
		case 'z': o->zerocopy = true; break;
		case 'x': o->xdp_skb = true; break;
		case 'c': o->core = atoi(optarg); break;
		default: usage();
		}
	}
	if (!o->iface) usage();
	if (o->ring < 64 || (o->ring & (o->ring - 1)) || o->batch == 0 || o->batch > o->ring ||
	    o->frames < 4 * o->ring || (o->frame_size != 2048 && o->frame_size != 4096) ||
	    o->size < 60 || o->size > 65535 || !(o->duration > 0)) {
		fprintf(stderr, "xsk_ref: bad ring/batch/frames/frame-size/size/duration\n");
		exit(2);
	}
	if (o->mode == MODE_TXONLY && !(o->have_dst && o->have_src && o->have_mac)) {
		fprintf(stderr, "xsk_ref: txonly needs --dst-ip, --src-ip and --dst-mac\n");
		exit(2);
	}
}

static int iface_info(const char *iface, uint8_t mac[6], unsigned *mtu)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", iface);
	int r = 0;
	if (ioctl(s, SIOCGIFHWADDR, &ifr) < 0) {
		r = -errno;
	} else {
		memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
		if (ioctl(s, SIOCGIFMTU, &ifr) < 0)
			r = -errno;
		else
			*mtu = (unsigned)ifr.ifr_mtu;
	}
	close(s);
	return r;
}

// One's-complement sum of a byte run, folded later.
static uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (n & 1)
		sum += (uint32_t)p[n - 1] << 8;
	return sum;
}

static uint16_t csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v & 0xff; }
static void put32(uint8_t *p, uint32_t v) { put16(p, v >> 16); put16(p + 2, v & 0xffff); }

// Ethernet + IPv4 (20 B) + TCP (20 B, ACK) + payload byte i = i % 251,
// zero-padded to 60 bytes: the same packet xtcp builds.
static uint8_t *build_packet(const struct opts *o, const uint8_t src_mac[6])
{
	size_t len = o->size;
	uint8_t *p = calloc(1, len);
	if (!p)
		die("calloc", ENOMEM);
	size_t payload = len > 54 ? len - 54 : 0;
	memcpy(p, o->dst_mac, 6);
	memcpy(p + 6, src_mac, 6);
	put16(p + 12, ETH_P_IP);
	uint8_t *ip = p + 14, *tcp = ip + 20, *data = tcp + 20;
	for (size_t i = 0; i < payload; i++)
		data[i] = (uint8_t)(i % 251);
	ip[0] = 0x45;
	put16(ip + 2, (uint16_t)(20 + 20 + payload));
	put16(ip + 6, 0x4000); // DF
	ip[8] = 64;
	ip[9] = IPPROTO_TCP;
	memcpy(ip + 12, &o->src_ip, 4);
	memcpy(ip + 16, &o->dst_ip, 4);
	put16(ip + 10, csum_fold(csum_add(0, ip, 20)));
	put16(tcp, 40000);
	put16(tcp + 2, o->port);
	put32(tcp + 4, 1);     // seq
	put32(tcp + 8, 1);     // ack
	tcp[12] = 5 << 4;      // data offset
	tcp[13] = 0x10;        // ACK
	put16(tcp + 14, 65535);
	uint8_t pseudo[12];
	memcpy(pseudo, ip + 12, 8);
	pseudo[8] = 0;
	pseudo[9] = IPPROTO_TCP;
	put16(pseudo + 10, (uint16_t)(20 + payload));
	uint32_t sum = csum_add(0, pseudo, 12);
	sum = csum_add(sum, tcp, 20 + payload);
	put16(tcp + 16, csum_fold(sum));
	return p;
}

struct ctx {
	struct opts o;
	void *area;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xsk_ring_prod fill, tx;
	struct xsk_ring_cons comp, rx;
	int fd;
	uint64_t packets, bytes, wakeups, ring_full;
	double loop_start, loop_end; // txonly: the send loop's window
};

static void kick_tx(struct ctx *c)
{
	c->wakeups++;
	if (sendto(c->fd, NULL, 0, MSG_DONTWAIT, NULL, 0) < 0) {
		int e = errno;
		if (e != EAGAIN && e != EBUSY && e != ENOBUFS && e != ENETDOWN)
			die("sendto (TX wakeup)", e);
	}
}

// Free-frame stacks, one per position in the chain (frame i holds piece i % k).
struct stacks {
	uint64_t **addr;
	uint32_t *len;
	unsigned k;
};

static void txonly(struct ctx *c, const uint8_t *pkt, double end)
{
	const struct opts *o = &c->o;
	const unsigned fs = o->frame_size;
	const unsigned k = (o->size + fs - 1) / fs;
	const uint32_t last_len = o->size - (k - 1) * fs;
	struct stacks st = {.k = k};
	st.addr = calloc(k, sizeof(*st.addr));
	st.len = calloc(k, sizeof(*st.len));
	for (unsigned p = 0; p < k; p++)
		st.addr[p] = calloc(o->frames, sizeof(uint64_t));
	for (unsigned i = 0; i < o->frames; i++) {
		unsigned pos = i % k;
		size_t plen = pos + 1 == k ? last_len : fs;
		memcpy((uint8_t *)c->area + (size_t)i * fs, pkt + (size_t)pos * fs, plen);
		st.addr[pos][st.len[pos]++] = (uint64_t)i * fs;
	}
	const uint32_t comp_max = o->batch * k * 2;
	uint64_t completed = 0;
	c->loop_start = now_s();
	for (;;) {
		double now = now_s();
		if (now >= end || stop_flag) {
			c->loop_end = now;
			break;
		}
		// Completions back to their position's stack.
		uint32_t idx;
		uint32_t n = xsk_ring_cons__peek(&c->comp, comp_max, &idx);
		for (uint32_t i = 0; i < n; i++) {
			uint64_t a = *xsk_ring_cons__comp_addr(&c->comp, idx + i);
			unsigned pos = (unsigned)((a / fs) % k);
			st.addr[pos][st.len[pos]++] = a;
		}
		if (n)
			xsk_ring_cons__release(&c->comp, n);
		completed += n;
		// As many whole chains as fit, up to --batch packets.
		uint32_t npkt = xsk_prod_nb_free(&c->tx, o->batch * k) / k;
		if (npkt > o->batch)
			npkt = o->batch;
		for (unsigned p = 0; p < k; p++)
			if (st.len[p] < npkt)
				npkt = st.len[p];
		if (npkt && xsk_ring_prod__reserve(&c->tx, npkt * k, &idx) == npkt * k) {
			for (uint32_t i = 0; i < npkt; i++) {
				for (unsigned p = 0; p < k; p++) {
					struct xdp_desc *d = xsk_ring_prod__tx_desc(&c->tx, idx++);
					d->addr = st.addr[p][--st.len[p]];
					d->len = p + 1 == k ? last_len : fs;
					d->options = p + 1 == k ? 0 : XDP_PKT_CONTD;
				}
			}
			xsk_ring_prod__submit(&c->tx, npkt * k);
		} else {
			c->ring_full++;
		}
		if (!o->need_wakeup || xsk_ring_prod__needs_wakeup(&c->tx))
			kick_tx(c);
	}
	// Let the last transmissions complete so that they are counted.
	double drain_end = now_s() + 0.2;
	for (;;) {
		uint32_t idx, n = xsk_ring_cons__peek(&c->comp, UINT32_MAX, &idx);
		if (n)
			xsk_ring_cons__release(&c->comp, n);
		completed += n;
		bool in_flight = *c->tx.producer != __atomic_load_n(c->tx.consumer, __ATOMIC_ACQUIRE);
		if (!in_flight || now_s() >= drain_end)
			break;
		kick_tx(c);
	}
	uint32_t idx, n = xsk_ring_cons__peek(&c->comp, UINT32_MAX, &idx);
	if (n)
		xsk_ring_cons__release(&c->comp, n);
	completed += n;
	c->packets = completed / k;
	c->bytes = c->packets * o->size;
	for (unsigned p = 0; p < k; p++)
		free(st.addr[p]);
	free(st.addr);
	free(st.len);
}

static void rxdrop(struct ctx *c, double end)
{
	const struct opts *o = &c->o;
	const unsigned fs = o->frame_size;
	uint64_t *pool = calloc(o->frames, sizeof(uint64_t));
	uint32_t npool = 0;
	for (unsigned i = 0; i < o->frames; i++)
		pool[npool++] = (uint64_t)i * fs;
	uint32_t idx;
	uint32_t nfill = o->ring * 2;
	if (xsk_ring_prod__reserve(&c->fill, nfill, &idx) != nfill)
		die("fill ring reserve", EINVAL);
	for (uint32_t i = 0; i < nfill; i++)
		*xsk_ring_prod__fill_addr(&c->fill, idx + i) = pool[--npool];
	xsk_ring_prod__submit(&c->fill, nfill);
	for (;;) {
		if (now_s() >= end || stop_flag)
			break;
		uint32_t n = xsk_ring_cons__peek(&c->rx, o->batch, &idx);
		if (n) {
			for (uint32_t i = 0; i < n; i++) {
				const struct xdp_desc *d = xsk_ring_cons__rx_desc(&c->rx, idx + i);
				c->bytes += d->len;
				c->packets += !(d->options & XDP_PKT_CONTD);
				// Strip the offset: the frame's base address.
				pool[npool++] = d->addr - d->addr % fs;
			}
			xsk_ring_cons__release(&c->rx, n);
			uint32_t want = xsk_prod_nb_free(&c->fill, npool);
			if (want > npool)
				want = npool;
			if (want && xsk_ring_prod__reserve(&c->fill, want, &idx) == want) {
				for (uint32_t i = 0; i < want; i++)
					*xsk_ring_prod__fill_addr(&c->fill, idx + i) = pool[--npool];
				xsk_ring_prod__submit(&c->fill, want);
			}
		} else if (o->need_wakeup && xsk_ring_prod__needs_wakeup(&c->fill)) {
			c->wakeups++;
			recvfrom(c->fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
		}
	}
	free(pool);
}

int main(int argc, char **argv)
{
	struct ctx c = {0};
	struct opts *o = &c.o;
	parse_args(argc, argv, o);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	if (o->core >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(o->core, &set);
		if (sched_setaffinity(0, sizeof(set), &set) < 0)
			die("sched_setaffinity", errno);
	}
	struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
	setrlimit(RLIMIT_MEMLOCK, &rl);

	uint8_t src_mac[6];
	unsigned mtu = 0;
	int r = iface_info(o->iface, src_mac, &mtu);
	if (r)
		die(o->iface, r);
	const unsigned fs = o->frame_size;
	bool multi_buffer = o->mode == MODE_TXONLY ? o->size > fs
						   : mtu + 14 > fs - XDP_HEADROOM_COPY;
	if (o->mode == MODE_TXONLY && o->size > mtu + 14) {
		fprintf(stderr, "xsk_ref: --size %u exceeds MTU %u + 14\n", o->size, mtu);
		return 2;
	}

	/* The same backing as xtcp's UMEM (engine/src/xsk/mmap.rs): aligned to
	 * 2 MiB and offered to transparent huge pages, so that the two ring
	 * layers compare on equal memory. */
	size_t area_len = (size_t)o->frames * fs;
	const size_t huge = 2u << 20;
	char *whole = mmap(NULL, area_len + huge, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (whole == MAP_FAILED)
		die("mmap UMEM", errno);
	c.area = (void *)(((uintptr_t)whole + huge - 1) & ~(uintptr_t)(huge - 1));
	madvise(c.area, area_len, MADV_HUGEPAGE);
	memset(c.area, 0, area_len);
	struct xsk_umem_config ucfg = {
		.fill_size = o->ring * 2,
		.comp_size = o->ring * 2,
		.frame_size = fs,
		.frame_headroom = 0,
		.flags = 0,
	};
	r = xsk_umem__create(&c.umem, c.area, area_len, &c.fill, &c.comp, &ucfg);
	if (r)
		die("xsk_umem__create", r);
	struct xsk_socket_config scfg = {
		.rx_size = o->ring,
		.tx_size = o->ring,
		// txonly needs no XDP program (xtcp attaches none either); rxdrop
		// lets libxdp load its default redirect-everything program.
		.libxdp_flags = o->mode == MODE_TXONLY ? XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD : 0,
		.xdp_flags = o->xdp_skb ? XDP_FLAGS_SKB_MODE : 0,
		.bind_flags = (uint16_t)((o->zerocopy ? XDP_ZEROCOPY : XDP_COPY) |
					 (o->need_wakeup ? XDP_USE_NEED_WAKEUP : 0) |
					 (multi_buffer ? XDP_USE_SG : 0)),
	};
	r = xsk_socket__create(&c.xsk, o->iface, o->queue, c.umem, &c.rx, &c.tx, &scfg);
	if (r)
		die("xsk_socket__create", r);
	c.fd = xsk_socket__fd(c.xsk);
	int tx_budget = 0; // 0: kernel default (32), option not set
	if (!o->zerocopy) {
		// Descriptors per TX wakeup in copy mode, as xtcp sets it.
		int budget = (int)(o->ring < 32 ? 32 : o->ring);
		if (setsockopt(c.fd, SOL_XDP, XDP_MAX_TX_SKB_BUDGET_OPT, &budget, sizeof(budget)) == 0)
			tx_budget = budget;
		else if (errno != ENOPROTOOPT)
			die("setsockopt XDP_MAX_TX_SKB_BUDGET", errno);
	}

	uint8_t *pkt = o->mode == MODE_TXONLY ? build_packet(o, src_mac) : NULL;
	double start = now_s();
	double end = start + o->duration;
	if (o->mode == MODE_TXONLY)
		txonly(&c, pkt, end);
	else
		rxdrop(&c, end);
	double secs = now_s() - start;
	if (o->mode == MODE_TXONLY && c.loop_end > c.loop_start)
		secs = c.loop_end - c.loop_start;

	struct xdp_statistics xs = {0};
	socklen_t xl = sizeof(xs);
	getsockopt(c.fd, SOL_XDP, XDP_STATISTICS, &xs, &xl);
	printf("{\"tool\":\"xsk_ref\",\"mode\":\"%s\",\"iface\":\"%s\",\"queue\":%u,\"size\":%u,"
	       "\"multi_buffer\":%s,\"need_wakeup\":%s,\"ring\":%u,\"batch\":%u,\"tx_budget\":%d,"
	       "\"packets\":%llu,\"bytes\":%llu,\"seconds\":%.6f,\"pps\":%.1f,\"gbps\":%.6f,"
	       "\"wakeups\":%llu,\"tx_ring_full_events\":%llu,"
	       "\"xdp_stats\":{\"rx_dropped\":%llu,\"rx_invalid_descs\":%llu,"
	       "\"tx_invalid_descs\":%llu,\"rx_ring_full\":%llu,"
	       "\"rx_fill_ring_empty_descs\":%llu,\"tx_ring_empty_descs\":%llu}}\n",
	       o->mode == MODE_TXONLY ? "txonly" : "rxdrop", o->iface, o->queue, o->size,
	       multi_buffer ? "true" : "false", o->need_wakeup ? "true" : "false", o->ring,
	       o->batch, tx_budget, (unsigned long long)c.packets, (unsigned long long)c.bytes, secs,
	       c.packets / secs, c.bytes * 8.0 / secs / 1e9, (unsigned long long)c.wakeups,
	       (unsigned long long)c.ring_full, (unsigned long long)xs.rx_dropped,
	       (unsigned long long)xs.rx_invalid_descs, (unsigned long long)xs.tx_invalid_descs,
	       (unsigned long long)xs.rx_ring_full,
	       (unsigned long long)xs.rx_fill_ring_empty_descs,
	       (unsigned long long)xs.tx_ring_empty_descs);
	fflush(stdout);

	xsk_socket__delete(c.xsk);
	xsk_umem__delete(c.umem);
	munmap(whole, area_len + huge);
	free(pkt);
	return 0;
}
