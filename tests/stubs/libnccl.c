/* Stand-in libnccl.so.2: the NCCL calls gdrdoctor makes for `preflight`, between processes over
 * TCP, moving and summing real data, and writing NCCL-format INFO and WARN lines to
 * NCCL_DEBUG_FILE, so that `gdrdoctor preflight` runs end to end on machines without GPUs or
 * NICs (tests/preflight.rs, contrib/slurm/preflight-test.sh). Test code only.
 *
 * - ncclGetUniqueId starts a bootstrap root in this process: a thread listening on an ephemeral
 *   TCP port whose address is the id. Every rank connects to it in ncclCommInitRank, says its
 *   rank, node and listening port, and gets the table of all ranks back once every rank is in
 *   (a rank that never comes makes the others wait, as NCCL's bootstrap does).
 * - ncclAllReduce (float32, sum) goes through the root: each rank sends its buffer, the root
 *   sums every rank's and sends the sum back. ncclSend/ncclRecv connect the two ranks directly
 *   (lazily, one socket per direction). Device memory is host memory (the stand-in libcuda),
 *   so the buffers are read and written in place.
 * - Work runs on the caller's stream as the stand-in libcuda's kernels do (stream_stub.h):
 *   cuStreamSynchronize and cuStreamQuery wait for it. Inside ncclGroupStart/ncclGroupEnd the
 *   calls are queued and started at ncclGroupEnd (initialisations first, in parallel).
 * - A failure of enqueued work (a peer gone) is an asynchronous error
 *   (ncclCommGetAsyncError = ncclRemoteError) with a WARN line, as NCCL reports it.
 *
 * The scenario (tests/stubs/README.md):
 *   nccl [host=NAME] [gdr=0|1] [addr=IP]   the node this process plays (its log's host, what
 *                                          ranks compare to tell the same node), GDR (default:
 *                                          from the node's facts: a peer-memory client, else
 *                                          dma-buf on every GPU and no failing
 *                                          ibv_reg_dmabuf_mr), the root's address (127.0.0.1)
 *   nccl_fail init                         ncclCommInitRank fails at once with ncclRemoteError,
 *                                          before reaching the root
 *   nccl_hang allreduce                    the first all-reduce of more than one element never
 *                                          returns from its enqueue (a rank stuck in NCCL)
 *   nccl_throttle rail=N mbps=M            sends from CUDA device N go at most M MB/s
 * NICs are the scenario's `device` lines (GPU i uses NIC i mod count); GPU addresses its `gpu`
 * lines. */
#include "stub.h"
#include "stream_stub.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>

#define LIB "libnccl"

/* What `strings` finds (gdrdoctor reads the version from the file). */
__attribute__((used)) static const char banner_[] = "NCCL version 2.30.7+cuda12.9";
#define VERSION_CODE 23007

typedef int ncclResult_t;
enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
};
typedef struct {
	char internal[128];
} ncclUniqueId;

#define NCCL_INT8 0
#define NCCL_UINT8 1
#define NCCL_FLOAT32 7
#define NCCL_SUM 0

#define MAGIC 0x6764726eu /* "gdrn" */
#define ID_MAGIC "gdrstub-nccl"
#define CHUNK (64 << 10)

struct peer_info {
	int32_t rank;
	int32_t cudev;
	char host[64];
	uint32_t ip; /* network order */
	uint16_t port; /* network order */
	uint16_t pad;
};

struct init_msg {
	uint32_t magic;
	int32_t nranks;
	struct peer_info info;
};

struct op_hdr {
	uint32_t magic;
	uint32_t kind;
	uint64_t bytes;
};

struct stub_comm {
	int rank, nranks, cudev;
	int root_fd, listen_fd;
	struct peer_info *peers;
	int *out_fd, *in_fd;
	char *p2p_logged;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int async_err; /* atomic */
	unsigned long long id;
};
typedef struct stub_comm *ncclComm_t;

/* ---- the process: its node, its log ----------------------------------------------------- */

static pthread_once_t once_ = PTHREAD_ONCE_INIT;
static char host_[64];
static int gdr_;
static int ndev_;
static uint32_t root_ip_;
static pthread_mutex_t log_lock_ = PTHREAD_MUTEX_INITIALIZER;
static int told_;
static char last_[768];

static void init_once(void)
{
	stub_load();
	const struct stub_line *n = stub_nth("nccl", 0);
	const char *h = stub_opt(n, "host");
	if (h)
		snprintf(host_, sizeof host_, "%s", h);
	else if (gethostname(host_, sizeof host_ - 1))
		snprintf(host_, sizeof host_, "localhost");
	ndev_ = stub_count("device");
	const struct stub_line *pm = stub_nth("peer_memory", 0);
	int peer = !(pm && stub_word(pm, 1) && !strcmp(stub_word(pm, 1), "no"));
	int dmabuf = 1;
	for (int i = 0; stub_nth("gpu", i); i++)
		if (!stub_opt_num(stub_nth("gpu", i), "dmabuf", 1))
			dmabuf = 0;
	for (int i = 0; stub_nth("fail", i); i++)
		if (stub_word(stub_nth("fail", i), 1) &&
		    !strcmp(stub_word(stub_nth("fail", i), 1), "ibv_reg_dmabuf_mr"))
			dmabuf = 0;
	gdr_ = peer || dmabuf;
	if (stub_opt(n, "gdr"))
		gdr_ = (int)stub_opt_num(n, "gdr", 1) != 0;
	const char *a = stub_opt(n, "addr");
	if (!a)
		a = "127.0.0.1";
	struct in_addr ia;
	if (inet_pton(AF_INET, a, &ia) != 1)
		stub_die("%s: nccl addr=%s is not an IPv4 address", stub_path_, a);
	root_ip_ = ia.s_addr;
}

static int env_on(const char *k)
{
	const char *v = getenv(k);
	return v && *v && strcmp(v, "0");
}

static int fault(const char *kind, const char *what)
{
	for (int i = 0; stub_nth(kind, i); i++)
		if (stub_word(stub_nth(kind, i), 1) && !strcmp(stub_word(stub_nth(kind, i), 1), what))
			return 1;
	return 0;
}

/* One NCCL log line, `host:pid:tid [dev] NCCL INFO|WARN text`, to NCCL_DEBUG_FILE (%h, %p
 * expanded) or stdout, as NCCL_DEBUG asks; one write per line. */
__attribute__((format(printf, 3, 4))) static void nlog(int dev, const char *level, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (!strcmp(level, "WARN")) {
		pthread_mutex_lock(&log_lock_);
		snprintf(last_, sizeof last_, "%s", msg);
		pthread_mutex_unlock(&log_lock_);
	}
	const char *dbg = getenv("NCCL_DEBUG");
	if (!dbg || !(!strcasecmp(dbg, "INFO") || !strcasecmp(dbg, "TRACE") ||
		      (!strcasecmp(dbg, "WARN") && !strcmp(level, "WARN"))))
		return;
	char line[1024];
	int n = snprintf(line, sizeof line, "%s:%d:%ld [%d] NCCL %s %s\n", host_, (int)getpid(),
			 (long)syscall(SYS_gettid), dev, level, msg);
	if (n < 0)
		return;
	if (n > (int)sizeof line - 1)
		n = (int)sizeof line - 1;
	const char *f = getenv("NCCL_DEBUG_FILE");
	if (!f || !*f) {
		ssize_t w = write(1, line, (size_t)n);
		(void)w;
		return;
	}
	char path[4096];
	size_t o = 0;
	for (const char *p = f; *p && o < sizeof path - 32; p++) {
		if (p[0] == '%' && p[1] == 'h') {
			o += (size_t)snprintf(path + o, sizeof path - o, "%s", host_);
			p++;
		} else if (p[0] == '%' && p[1] == 'p') {
			o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
			p++;
		} else {
			path[o++] = *p;
		}
	}
	path[o] = 0;
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		ssize_t w = write(fd, line, (size_t)n);
		(void)w;
		close(fd);
	}
}

/* ---- sockets ------------------------------------------------------------------------------ */

static int send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int recv_all(int fd, void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t r = recv(fd, c, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

static int listen_any(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t l = sizeof a;
	if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4096) ||
	    getsockname(fd, (struct sockaddr *)&a, &l)) {
		close(fd);
		return -1;
	}
	*port = a.sin_port;
	return fd;
}

static int connect_to(uint32_t ip, uint16_t port, int tries)
{
	for (int t = 0; t < tries; t++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = ip, .sin_port = port };
		if (!connect(fd, (struct sockaddr *)&a, sizeof a)) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			return fd;
		}
		close(fd);
		usleep(100 * 1000);
	}
	return -1;
}

/* ---- the bootstrap root ------------------------------------------------------------------- */

struct root {
	int listen_fd;
	int serving; /* atomic: every rank met, the all-reduces are carried */
};

/* The roots this process serves. NCCL's bootstrap root is only needed while the ranks meet;
 * this one also carries every all-reduce, so the process that made the id must not end before
 * every rank has its last sum: at exit it waits for its roots to see every rank go. */
#define MAX_ROOTS 16
static pthread_t roots_[MAX_ROOTS];
static struct root *root_of_[MAX_ROOTS];
static int nroots_;
static pthread_mutex_t roots_lock_ = PTHREAD_MUTEX_INITIALIZER;

static void wait_for_roots(void)
{
	pthread_mutex_lock(&roots_lock_);
	int n = nroots_;
	nroots_ = 0;
	pthread_mutex_unlock(&roots_lock_);
	for (int i = 0; i < n; i++) {
		if (!__atomic_load_n(&root_of_[i]->serving, __ATOMIC_ACQUIRE))
			continue; /* the ranks never all met: nothing to carry */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 20;
		pthread_timedjoin_np(roots_[i], NULL, &until);
	}
}

/* Collect every rank, hand out the table, then serve the all-reduces: for each, read every
 * rank's contribution in rank order, sum, send the sum to every rank. A rank that goes away
 * ends it all: every other rank sees its connection close. */
static void *root_main(void *arg)
{
	struct root *r = arg;
	int n = -1, have = 0;
	int *fds = NULL;
	struct peer_info *table = NULL;
	while (n < 0 || have < n) {
		int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		struct init_msg m;
		if (recv_all(fd, &m, sizeof m) || m.magic != MAGIC || m.nranks <= 0 ||
		    (n >= 0 && m.nranks != n) || m.info.rank < 0 || m.info.rank >= m.nranks) {
			close(fd);
			continue;
		}
		if (n < 0) {
			n = m.nranks;
			fds = malloc((size_t)n * sizeof *fds);
			table = calloc((size_t)n, sizeof *table);
			if (!fds || !table)
				stub_die("out of memory");
			for (int i = 0; i < n; i++)
				fds[i] = -1;
		}
		if (fds[m.info.rank] >= 0) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		fds[m.info.rank] = fd;
		table[m.info.rank] = m.info;
		have++;
	}
	close(r->listen_fd);
	__atomic_store_n(&r->serving, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < n; i++)
		if (send_all(fds[i], table, (size_t)n * sizeof *table))
			goto gone;
	float *buf = malloc(CHUNK);
	if (!buf)
		stub_die("out of memory");
	for (;;) {
		float *sum = NULL;
		uint64_t bytes = 0;
		for (int i = 0; i < n; i++) {
			struct op_hdr h;
			if (recv_all(fds[i], &h, sizeof h) || h.magic != MAGIC)
				goto gone;
			if (i == 0) {
				bytes = h.bytes;
				if (bytes % 4 || bytes > (1ull << 32))
					goto gone;
				sum = calloc(1, bytes ? bytes : 4);
				if (!sum)
					stub_die("out of memory");
			} else if (h.bytes != bytes) {
				goto gone;
			}
			for (uint64_t o = 0; o < bytes; o += CHUNK) {
				size_t k = (size_t)(bytes - o < CHUNK ? bytes - o : CHUNK);
				if (recv_all(fds[i], buf, k))
					goto gone;
				for (size_t j = 0; j < k / 4; j++)
					sum[o / 4 + j] += buf[j];
			}
		}
		for (int i = 0; i < n; i++) {
			struct op_hdr h = { MAGIC, 1, bytes };
			if (send_all(fds[i], &h, sizeof h) || send_all(fds[i], sum, (size_t)bytes))
				goto gone;
		}
		free(sum);
	}
gone:
	for (int i = 0; i < n; i++)
		if (fds && fds[i] >= 0) {
			shutdown(fds[i], SHUT_RDWR);
			close(fds[i]);
		}
	return NULL;
}

ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return ncclInvalidArgument;
	*version = VERSION_CODE;
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	pthread_once(&once_, init_once);
	if (!id)
		return ncclInvalidArgument;
	uint16_t port;
	struct root *r = calloc(1, sizeof *r);
	if (!r)
		return ncclSystemError;
	r->listen_fd = listen_any(&port);
	if (r->listen_fd < 0) {
		nlog(0, "WARN", "Bootstrap : cannot listen: %s", strerror(errno));
		return ncclSystemError;
	}
	pthread_t t;
	pthread_mutex_lock(&roots_lock_);
	if (nroots_ == MAX_ROOTS || pthread_create(&t, NULL, root_main, r)) {
		pthread_mutex_unlock(&roots_lock_);
		return ncclSystemError;
	}
	if (nroots_++ == 0)
		atexit(wait_for_roots);
	roots_[nroots_ - 1] = t;
	root_of_[nroots_ - 1] = r;
	pthread_mutex_unlock(&roots_lock_);
	memset(id, 0, sizeof *id);
	memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
	memcpy(id->internal + 16, &root_ip_, 4);
	memcpy(id->internal + 20, &port, 2);
	unsigned long long nonce = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
	memcpy(id->internal + 24, &nonce, 8);
	stub_log(LIB, "ncclGetUniqueId -> 0 (root port %d)", ntohs(port));
	return ncclSuccess;
}

/* ---- communicators ------------------------------------------------------------------------- */

static void *accept_main(void *arg)
{
	struct stub_comm *c = arg;
	for (;;) {
		int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		int32_t from;
		if (recv_all(fd, &from, sizeof from) || from < 0 || from >= c->nranks) {
			close(fd);
			continue;
		}
		pthread_mutex_lock(&c->lock);
		c->in_fd[from] = fd;
		pthread_cond_broadcast(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
}

/* The GPU's bus id as NCCL prints it (0000:18:00.0 -> 18000). */
static void bus_id(int cudev, char *out, size_t n)
{
	const char *b = stub_opt(stub_nth("gpu", cudev), "bdf");
	unsigned dom = 0, bus = 0, dev = 0, fn = 0;
	if (!b || sscanf(b, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) {
		snprintf(out, n, "%x000", cudev + 1);
		return;
	}
	snprintf(out, n, "%x%02x%x", bus, dev, fn);
}

/* How this rank reaches a peer, as NCCL's channel lines say it. */
static void transport(const struct stub_comm *c, int peer, char *out, size_t n)
{
	int same = !strcmp(c->peers[peer].host, host_);
	if (same && !env_on("NCCL_P2P_DISABLE"))
		snprintf(out, n, "P2P/CUMEM");
	else if (same && !env_on("NCCL_SHM_DISABLE"))
		snprintf(out, n, "SHM/direct/direct");
	else if (ndev_ > 0)
		snprintf(out, n, "NET/IB/%d%s", c->cudev % ndev_, gdr_ ? "/GDRDMA" : "");
	else
		snprintf(out, n, "NET/Socket/0");
}

static int is_net(const char *t)
{
	return !strncmp(t, "NET/", 4);
}

/* What NCCL says once per process at its first initialisation. */
static void tell_once(int dev)
{
	pthread_mutex_lock(&log_lock_);
	int first = !told_;
	told_ = 1;
	pthread_mutex_unlock(&log_lock_);
	if (!first)
		return;
	nlog(dev, "INFO", "NCCL version 2.30.7+cuda12.9");
	static const char *const vars[] = { "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
					    "NCCL_NVLS_ENABLE", "NCCL_NET_GDR_LEVEL", NULL };
	for (const char *const *v = vars; *v; v++)
		if (getenv(*v))
			nlog(dev, "INFO", "%s set by environment to %s", *v, getenv(*v));
	if (ndev_ == 0) {
		nlog(dev, "INFO", "NET/Socket : Using [0]lo:127.0.0.1<0>");
		nlog(dev, "INFO", "Using network Socket");
		return;
	}
	char list[512] = "";
	size_t o = 0;
	for (int i = 0; i < ndev_ && o < sizeof list - 80; i++)
		o += (size_t)snprintf(list + o, sizeof list - o, "[%d]%s:1/IB ", i,
				      stub_word(stub_nth("device", i), 1));
	nlog(dev, "INFO", "NET/IB : Using %s; OOB lo:127.0.0.1<0>", list);
	nlog(dev, "INFO", "Using network IB");
	for (int i = 0; i < ndev_; i++)
		nlog(dev, "INFO", "NET/IB : GPU Direct RDMA %s for HCA %d '%s'",
		     gdr_ ? "Enabled" : "Disabled", i, stub_word(stub_nth("device", i), 1));
}

static ncclResult_t init_rank(struct stub_comm **out, int nranks, ncclUniqueId id, int rank, int cudev)
{
	pthread_once(&once_, init_once);
	tell_once(cudev);
	if (fault("nccl_fail", "init")) {
		nlog(cudev, "WARN", "Bootstrap : rank %d could not connect to the root: remote process exited or there was a network error", rank);
		stub_log(LIB, "ncclCommInitRank rank %d -> 6 (planted)", rank);
		return ncclRemoteError;
	}
	if (memcmp(id.internal, ID_MAGIC, sizeof ID_MAGIC) || nranks <= 0 || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	struct stub_comm *c = calloc(1, sizeof *c);
	if (!c)
		return ncclSystemError;
	c->rank = rank;
	c->nranks = nranks;
	c->cudev = cudev;
	memcpy(&c->id, id.internal + 24, 8);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->peers = calloc((size_t)nranks, sizeof *c->peers);
	c->out_fd = malloc((size_t)nranks * sizeof(int));
	c->in_fd = malloc((size_t)nranks * sizeof(int));
	c->p2p_logged = calloc((size_t)nranks, 1);
	if (!c->peers || !c->out_fd || !c->in_fd || !c->p2p_logged)
		return ncclSystemError;
	for (int i = 0; i < nranks; i++)
		c->out_fd[i] = c->in_fd[i] = -1;
	char bus[32];
	bus_id(cudev, bus, sizeof bus);
	nlog(cudev, "INFO", "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId 0x%llx - Init START",
	     (void *)c, rank, nranks, cudev, cudev, bus, c->id);
	uint16_t port;
	c->listen_fd = listen_any(&port);
	if (c->listen_fd < 0)
		return ncclSystemError;
	uint32_t rip;
	uint16_t rport;
	memcpy(&rip, id.internal + 16, 4);
	memcpy(&rport, id.internal + 20, 2);
	c->root_fd = connect_to(rip, rport, 300);
	if (c->root_fd < 0) {
		nlog(cudev, "WARN", "Bootstrap : connection to the root at port %d failed: remote process exited or there was a network error", ntohs(rport));
		return ncclRemoteError;
	}
	struct sockaddr_in me;
	socklen_t l = sizeof me;
	getsockname(c->root_fd, (struct sockaddr *)&me, &l);
	struct init_msg m = { .magic = MAGIC, .nranks = nranks };
	m.info.rank = rank;
	m.info.cudev = cudev;
	snprintf(m.info.host, sizeof m.info.host, "%s", host_);
	m.info.ip = me.sin_addr.s_addr;
	m.info.port = port;
	if (send_all(c->root_fd, &m, sizeof m) ||
	    recv_all(c->root_fd, c->peers, (size_t)nranks * sizeof *c->peers)) {
		nlog(cudev, "WARN", "Bootstrap : the root went away: remote process exited or there was a network error");
		return ncclRemoteError;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, accept_main, c))
		return ncclSystemError;
	pthread_detach(t);
	if (nranks > 1) {
		int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
		char tn[64], tp[64];
		transport(c, next, tn, sizeof tn);
		transport(c, prev, tp, sizeof tp);
		if (is_net(tn))
			nlog(cudev, "INFO", "Channel 00/0 : %d[%d] -> %d[%d] [send] via %s", rank, cudev, next,
			     c->peers[next].cudev, tn);
		else
			nlog(cudev, "INFO", "Channel 00/0 : %d[%d] -> %d[%d] via %s", rank, cudev, next,
			     c->peers[next].cudev, tn);
		if (is_net(tp))
			nlog(cudev, "INFO", "Channel 00/0 : %d[%d] -> %d[%d] [receive] via %s", prev,
			     c->peers[prev].cudev, rank, cudev, tp);
	}
	nlog(cudev, "INFO", "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId 0x%llx - Init COMPLETE",
	     (void *)c, rank, nranks, cudev, cudev, bus, c->id);
	stub_log(LIB, "ncclCommInitRank rank %d of %d cudaDev %d -> 0", rank, nranks, cudev);
	*out = c;
	return ncclSuccess;
}

/* ---- work on streams ----------------------------------------------------------------------- */

enum { OP_ALLREDUCE, OP_SEND, OP_RECV };

struct op {
	int kind;
	struct stub_comm *c;
	const void *sbuf;
	void *rbuf;
	size_t bytes;
	int peer;
	struct stub_stream *s;
};

struct pinit {
	ncclComm_t *out;
	int nranks;
	ncclUniqueId id;
	int rank;
	int cudev;
	ncclResult_t result;
};

static __thread int depth_;
static __thread struct op *ops_;
static __thread int nops_, capops_;
static __thread struct pinit *inits_;
static __thread int ninits_, capinits_;
static int hung_;

static void fail_async(struct stub_comm *c, const char *what)
{
	__atomic_store_n(&c->async_err, ncclRemoteError, __ATOMIC_RELEASE);
	nlog(c->cudev, "WARN", "%s: remote process exited or there was a network error", what);
}

static int op_allreduce(struct op *o)
{
	struct op_hdr h = { MAGIC, 1, o->bytes };
	if (send_all(o->c->root_fd, &h, sizeof h) || send_all(o->c->root_fd, o->sbuf, o->bytes) ||
	    recv_all(o->c->root_fd, &h, sizeof h) || h.magic != MAGIC || h.bytes != o->bytes ||
	    recv_all(o->c->root_fd, o->rbuf, o->bytes)) {
		fail_async(o->c, "AllReduce : the root's connection closed");
		return -1;
	}
	return 0;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void log_p2p(struct stub_comm *c, int peer)
{
	pthread_mutex_lock(&c->lock);
	int first = !c->p2p_logged[peer];
	c->p2p_logged[peer] = 1;
	pthread_mutex_unlock(&c->lock);
	if (!first)
		return;
	char t[64];
	transport(c, peer, t, sizeof t);
	nlog(c->cudev, "INFO", "Channel 00/1 : %d[%d] -> %d[%d] [send] via %s", c->rank, c->cudev, peer,
	     c->peers[peer].cudev, t);
	nlog(c->cudev, "INFO", "Channel 00/1 : %d[%d] -> %d[%d] [receive] via %s", peer,
	     c->peers[peer].cudev, c->rank, c->cudev, t);
}

static int op_send(struct op *o)
{
	struct stub_comm *c = o->c;
	log_p2p(c, o->peer);
	if (c->out_fd[o->peer] < 0) {
		int fd = connect_to(c->peers[o->peer].ip, c->peers[o->peer].port, 50);
		int32_t me = c->rank;
		if (fd < 0 || send_all(fd, &me, sizeof me)) {
			fail_async(c, "Send : cannot reach the peer");
			return -1;
		}
		c->out_fd[o->peer] = fd;
	}
	double mbps = 0;
	for (int i = 0; stub_nth("nccl_throttle", i); i++) {
		const struct stub_line *t = stub_nth("nccl_throttle", i);
		if (stub_opt_num(t, "rail", -1) == c->cudev)
			mbps = (double)stub_opt_num(t, "mbps", 1);
	}
	struct op_hdr h = { MAGIC, 2, o->bytes };
	if (send_all(c->out_fd[o->peer], &h, sizeof h))
		goto bad;
	double t0 = now_s();
	for (size_t off = 0; off < o->bytes; off += CHUNK) {
		size_t k = o->bytes - off < CHUNK ? o->bytes - off : CHUNK;
		/* A slow link: a chunk leaves when the link would have carried it, so that the
		 * last byte arrives at bytes / rate (both ends finish together). */
		if (mbps > 0) {
			double due = t0 + (double)(off + k) / (mbps * 1e6);
			double left = due - now_s();
			if (left > 0)
				usleep((useconds_t)(left * 1e6));
		}
		if (send_all(c->out_fd[o->peer], (const char *)o->sbuf + off, k))
			goto bad;
	}
	return 0;
bad:
	fail_async(c, "Send : the peer's connection closed");
	return -1;
}

static int op_recv(struct op *o)
{
	struct stub_comm *c = o->c;
	log_p2p(c, o->peer);
	pthread_mutex_lock(&c->lock);
	while (c->in_fd[o->peer] < 0)
		pthread_cond_wait(&c->cond, &c->lock);
	int fd = c->in_fd[o->peer];
	pthread_mutex_unlock(&c->lock);
	struct op_hdr h;
	if (recv_all(fd, &h, sizeof h) || h.magic != MAGIC || h.bytes != o->bytes ||
	    recv_all(fd, o->rbuf, o->bytes)) {
		fail_async(c, "Recv : the peer's connection closed");
		return -1;
	}
	return 0;
}

static void *recv_main(void *arg)
{
	op_recv(arg);
	return NULL;
}

struct job {
	struct op *ops;
	int n;
};

/* One stream's work: the all-reduces in order; a group's receives on threads of their own
 * while its sends go (both directions at once, as NCCL's proxies). */
static void *stream_main(void *arg)
{
	struct job *j = arg;
	pthread_t *th = calloc((size_t)j->n, sizeof *th);
	int *started = calloc((size_t)j->n, sizeof *started);
	if (!th || !started)
		stub_die("out of memory");
	for (int i = 0; i < j->n; i++)
		if (j->ops[i].kind == OP_RECV)
			started[i] = !pthread_create(&th[i], NULL, recv_main, &j->ops[i]);
	for (int i = 0; i < j->n; i++) {
		if (j->ops[i].kind == OP_ALLREDUCE)
			op_allreduce(&j->ops[i]);
		else if (j->ops[i].kind == OP_SEND)
			op_send(&j->ops[i]);
		else if (!started[i])
			op_recv(&j->ops[i]);
	}
	for (int i = 0; i < j->n; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	struct stub_stream *s = j->ops[0].s;
	free(th);
	free(started);
	free(j->ops);
	free(j);
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Start the queued work: one thread per stream, after the stream's earlier work. */
static ncclResult_t launch(struct op *ops, int n)
{
	for (int i = 0; i < n; i++)
		if (ops[i].kind == OP_ALLREDUCE && ops[i].bytes > 4 && fault("nccl_hang", "allreduce") &&
		    !__atomic_exchange_n(&hung_, 1, __ATOMIC_ACQ_REL)) {
			stub_log(LIB, "ncclAllReduce -> hang (planted, pid %d)", (int)getpid());
			for (;;)
				pause();
		}
	char *done = calloc((size_t)n ? (size_t)n : 1, 1);
	if (!done)
		return ncclSystemError;
	for (int i = 0; i < n; i++) {
		if (done[i])
			continue;
		struct stub_stream *s = ops[i].s;
		struct job *j = calloc(1, sizeof *j);
		if (!j || !(j->ops = calloc((size_t)n, sizeof *j->ops)))
			return ncclSystemError;
		for (int k = i; k < n; k++)
			if (ops[k].s == s && !done[k]) {
				j->ops[j->n++] = ops[k];
				done[k] = 1;
			}
		if (s->running) {
			pthread_join(s->thread, NULL);
			s->running = 0;
		}
		__atomic_store_n(&s->done, 0, __ATOMIC_RELEASE);
		if (pthread_create(&s->thread, NULL, stream_main, j))
			return ncclSystemError;
		s->running = 1;
	}
	free(done);
	return ncclSuccess;
}

static ncclResult_t enqueue(struct op o)
{
	if (!o.c || !o.s)
		return ncclInvalidArgument;
	if (__atomic_load_n(&o.c->async_err, __ATOMIC_ACQUIRE))
		return __atomic_load_n(&o.c->async_err, __ATOMIC_ACQUIRE);
	if (depth_ == 0)
		return launch(&o, 1);
	if (nops_ == capops_) {
		capops_ = capops_ ? 2 * capops_ : 16;
		ops_ = realloc(ops_, (size_t)capops_ * sizeof *ops_);
		if (!ops_)
			return ncclSystemError;
	}
	ops_[nops_++] = o;
	return ncclSuccess;
}

static size_t elem(int dtype)
{
	switch (dtype) {
	case NCCL_INT8:
	case NCCL_UINT8:
		return 1;
	case NCCL_FLOAT32:
		return 4;
	default:
		return 0;
	}
}

/* The current CUDA device, asked of the stand-in libcuda as NCCL asks cudaGetDevice. */
static int current_device(void)
{
	void *h = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return 0;
	int (*f)(int *) = (int (*)(int *))dlsym(h, "cuCtxGetDevice");
	int d = 0;
	if (!f || f(&d))
		d = 0;
	dlclose(h);
	return d;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	if (!comm)
		return ncclInvalidArgument;
	*comm = NULL;
	int dev = current_device();
	if (depth_ == 0)
		return init_rank(comm, nranks, id, rank, dev);
	if (ninits_ == capinits_) {
		capinits_ = capinits_ ? 2 * capinits_ : 16;
		inits_ = realloc(inits_, (size_t)capinits_ * sizeof *inits_);
		if (!inits_)
			return ncclSystemError;
	}
	inits_[ninits_++] = (struct pinit){ comm, nranks, id, rank, dev, ncclSuccess };
	return ncclSuccess;
}

static void *init_main(void *arg)
{
	struct pinit *p = arg;
	p->result = init_rank(p->out, p->nranks, p->id, p->rank, p->cudev);
	return NULL;
}

ncclResult_t ncclGroupStart(void)
{
	depth_++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	if (depth_ <= 0)
		return ncclInvalidUsage;
	if (--depth_ > 0)
		return ncclSuccess;
	ncclResult_t r = ncclSuccess;
	if (ninits_) {
		pthread_t *th = calloc((size_t)ninits_, sizeof *th);
		if (!th)
			return ncclSystemError;
		for (int i = 0; i < ninits_; i++)
			if (pthread_create(&th[i], NULL, init_main, &inits_[i]))
				inits_[i].result = ncclSystemError;
		for (int i = 0; i < ninits_; i++)
			pthread_join(th[i], NULL);
		for (int i = 0; i < ninits_; i++)
			if (inits_[i].result && !r)
				r = inits_[i].result;
		free(th);
		ninits_ = 0;
	}
	if (nops_) {
		ncclResult_t l = launch(ops_, nops_);
		nops_ = 0;
		if (!r)
			r = l;
	}
	return r;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
			   ncclComm_t comm, void *stream)
{
	if (datatype != NCCL_FLOAT32 || op != NCCL_SUM || !sendbuff || !recvbuff)
		return ncclInvalidArgument;
	return enqueue((struct op){ OP_ALLREDUCE, comm, sendbuff, recvbuff, count * 4, -1, stream });
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, int datatype, int peer, ncclComm_t comm,
		      void *stream)
{
	size_t e = elem(datatype);
	if (!e || !comm || peer < 0 || peer >= comm->nranks || peer == comm->rank)
		return ncclInvalidArgument;
	return enqueue((struct op){ OP_SEND, comm, sendbuff, NULL, count * e, peer, stream });
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, int datatype, int peer, ncclComm_t comm,
		      void *stream)
{
	size_t e = elem(datatype);
	if (!e || !comm || peer < 0 || peer >= comm->nranks || peer == comm->rank)
		return ncclInvalidArgument;
	return enqueue((struct op){ OP_RECV, comm, NULL, recvbuff, count * e, peer, stream });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
	if (!comm || !err)
		return ncclInvalidArgument;
	*err = __atomic_load_n(&comm->async_err, __ATOMIC_ACQUIRE);
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclInvalidArgument;
	/* The sockets close; the communicator itself is left (its threads may still hold it):
	 * the process ends soon after. */
	shutdown(comm->listen_fd, SHUT_RDWR);
	close(comm->root_fd);
	for (int i = 0; i < comm->nranks; i++)
		if (comm->out_fd[i] >= 0)
			close(comm->out_fd[i]);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	return ncclCommDestroy(comm);
}

const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError:
		return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError:
		return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument:
		return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage:
		return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	default:
		return "unknown result code";
	}
}

const char *ncclGetLastError(ncclComm_t comm)
{
	(void)comm;
	return last_;
}
