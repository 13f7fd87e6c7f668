/* Stand-in libibverbs.so.1: the verbs gdrdoctor calls, written against the public rdma-core
 * header <infiniband/verbs.h> (the compiler checks every prototype against it) and exported
 * with rdma-core's symbol versions (libibverbs.map: IBVERBS_1.1, and IBVERBS_1.12 for
 * ibv_reg_dmabuf_mr; libibverbs-old.map leaves it out, as rdma-core < 34 does).
 *
 * Scripted by the scenario (stub.h, tests/stubs/README.md): the devices, their ports and
 * firmware, whether a peer-memory client serves GPU memory, the locked-memory limit the
 * kernel applies, and `fail` lines for any other outcome. Where the real stack decides from
 * what it is given (an fd of -1, memory that is not mapped, access flags), the stand-in decides
 * the same way, in the same order, and each such place cites the line of the real code.
 *
 * Sources (line numbers of the trees read for this file):
 *   rdma-core v64.0-61-g691953d8d; Linux 6.1.192 (Debian 12's linux-source-6.1);
 *   NCCL 2.30 (NVIDIA/nccl 5067397c). */
#include "verbs_stub.h"

#include <endian.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* The exported entry points: verbs.h turns these names into macros over inlines. */
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr

#define LIB "libibverbs"

static struct stub_device *devices_;
static int ndevices_;
static pthread_once_t devices_once_ = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_handle_ = 1;
/* Bytes pinned by live ibv_reg_mr MRs: the kernel's mm->pinned_vm (umem.c:221). */
static long long pinned_;

__attribute__((constructor)) static void on_load(void)
{
	stub_maybe_hang(LIB);
}

static void make_devices(void)
{
	ndevices_ = stub_count("device");
	devices_ = calloc((size_t)ndevices_ + 1, sizeof *devices_);
	if (!devices_)
		stub_die("out of memory");
	for (int i = 0; i < ndevices_; i++) {
		struct stub_device *s = &devices_[i];
		const struct stub_line *l = stub_nth("device", i);
		const char *name = stub_word(l, 1);
		if (!name || strchr(name, '='))
			stub_die("%s:%d: `device` needs a name", stub_path_, l->no);
		s->magic = STUB_DEVICE_MAGIC;
		s->index = i;
		s->line = l;
		s->dev.node_type = IBV_NODE_CA;
		s->dev.transport_type = IBV_TRANSPORT_IB;
		snprintf(s->dev.name, sizeof s->dev.name, "%s", name);
		snprintf(s->dev.dev_name, sizeof s->dev.dev_name, "uverbs%d", i);
		snprintf(s->dev.dev_path, sizeof s->dev.dev_path,
			 "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(s->dev.ibdev_path, sizeof s->dev.ibdev_path, "/sys/class/infiniband/%s",
			 name);
	}
}

/* Set errno from a `fail` line that matches, and return 1; 0 when none does. */
static int scripted(const struct stub_call *c)
{
	const struct stub_line *l = stub_fail(c);
	if (!l)
		return 0;
	const char *e = stub_opt(l, "errno");
	if (!e)
		stub_die("%s:%d: `fail %s` needs errno=", stub_path_, l->no, c->call);
	errno = stub_errno(l, e);
	return 1;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	pthread_once(&devices_once_, make_devices);
	/* No /sys/class/infiniband_verbs: ENOSYS (rdma-core libibverbs/init.c:216-218). */
	const struct stub_line *l = stub_nth("list", 0);
	if (l) {
		const char *e = stub_opt(l, "errno");
		if (!e)
			stub_die("%s:%d: `list` needs errno=", stub_path_, l->no);
		errno = stub_errno(l, e);
		stub_log(LIB, "ibv_get_device_list -> NULL errno %d", errno);
		if (num_devices)
			*num_devices = 0;
		return NULL;
	}
	struct ibv_device **list = calloc((size_t)ndevices_ + 1, sizeof *list);
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < ndevices_; i++)
		list[i] = &devices_[i].dev;
	if (num_devices)
		*num_devices = ndevices_;
	stub_log(LIB, "ibv_get_device_list -> %d", ndevices_);
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	struct stub_device *s = stub_device_of(device);
	return s ? s->dev.name : NULL;
}

static uint64_t guid_of(const struct stub_device *s)
{
	return (uint64_t)stub_opt_num(s->line, "guid",
				      (long long)(0x0c42a10300a1b200ULL + (uint64_t)s->index));
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct stub_device *s = stub_device_of(device);
	return s ? htobe64(guid_of(s)) : 0;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct stub_device *s = stub_device_of(device);
	if (!s) {
		errno = ENODEV;
		return NULL;
	}
	/* open(/dev/infiniband/uverbsN) failing (EACCES without permission) fails the open
	 * with open(2)'s errno: rdma-core libibverbs/device.c:335-338. */
	struct stub_call c = { .call = "ibv_open_device", .device = s->dev.name, .len = -1 };
	if (scripted(&c)) {
		stub_log(LIB, "ibv_open_device %s -> NULL errno %d", s->dev.name, errno);
		return NULL;
	}
	struct stub_context *sc = calloc(1, sizeof *sc);
	if (!sc) {
		errno = ENOMEM;
		return NULL;
	}
	sc->ctx.device = &s->dev;
	sc->ctx.cmd_fd = -1;
	sc->ctx.async_fd = -1;
	sc->ctx.num_comp_vectors = 1;
	pthread_mutex_init(&sc->ctx.mutex, NULL);
	sc->magic = STUB_CONTEXT_MAGIC;
	sc->sdev = s;
	stub_log(LIB, "ibv_open_device %s -> ok", s->dev.name);
	return &sc->ctx;
}

int ibv_close_device(struct ibv_context *context)
{
	struct stub_context *sc = stub_context_of(context);
	if (!sc)
		return EINVAL;
	stub_log(LIB, "ibv_close_device %s", sc->sdev->dev.name);
	sc->magic = 0;
	pthread_mutex_destroy(&sc->ctx.mutex);
	free(sc);
	return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	struct stub_context *sc = stub_context_of(context);
	if (!sc || !attr)
		return EINVAL;
	struct stub_device *s = sc->sdev;
	struct stub_call c = { .call = "ibv_query_device", .device = s->dev.name, .len = -1 };
	if (scripted(&c))
		return errno;
	memset(attr, 0, sizeof *attr);
	const char *fw = stub_opt(s->line, "fw");
	snprintf(attr->fw_ver, sizeof attr->fw_ver, "%s", fw ? fw : "28.43.1014");
	attr->node_guid = htobe64(guid_of(s));
	attr->sys_image_guid = attr->node_guid;
	attr->max_mr_size = ~0ULL;
	attr->page_size_cap = 0xfffffffffffff000ULL;
	attr->vendor_id = (uint32_t)stub_opt_num(s->line, "vendor", 0x02c9);
	attr->vendor_part_id = (uint32_t)stub_opt_num(s->line, "part", 4129);
	attr->max_qp = 131072;
	attr->max_qp_wr = 32768;
	attr->max_sge = 30;
	attr->max_cq = 16777216;
	attr->max_cqe = 4194303;
	attr->max_mr = 16777216;
	attr->max_pd = 16777216;
	attr->max_pkeys = 128;
	attr->phys_port_cnt = (uint8_t)stub_opt_num(s->line, "ports", 1);
	stub_log(LIB, "ibv_query_device %s -> fw %s", s->dev.name, attr->fw_ver);
	return 0;
}

static int code_of(const struct stub_line *l, const char *key, const char *const *names,
		   const int *codes, int dflt)
{
	const char *v = stub_opt(l, key);
	if (!v)
		return dflt;
	for (int i = 0; names[i]; i++)
		if (!strcmp(names[i], v))
			return codes[i];
	return (int)stub_num(l, v);
}

/* The exported compat symbol fills struct ibv_port_attr up to `flags` only (the verbs.h
 * inline zeroes the whole struct first, and so does gdrdoctor). */
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
		   struct _compat_ibv_port_attr *compat)
{
	struct stub_context *sc = stub_context_of(context);
	if (!sc || !compat)
		return EINVAL;
	struct stub_device *s = sc->sdev;
	if (port_num < 1 || port_num > stub_opt_num(s->line, "ports", 1))
		return EINVAL;
	struct stub_call c = { .call = "ibv_query_port", .device = s->dev.name, .len = -1 };
	if (scripted(&c))
		return errno;
	const struct stub_line *l = NULL;
	for (int n = 0; (l = stub_nth("port", n)); n++)
		if (stub_word(l, 1) && !strcmp(stub_word(l, 1), s->dev.name) && stub_word(l, 2) &&
		    stub_num(l, stub_word(l, 2)) == port_num)
			break;
	static const char *const states[] = { "DOWN", "INIT", "ARMED", "ACTIVE", NULL };
	static const int state_codes[] = { 1, 2, 3, 4 };
	static const char *const phys[] = { "Sleep", "Polling", "Disabled", "LinkUp", NULL };
	static const int phys_codes[] = { 1, 2, 3, 5 };
	static const char *const layers[] = { "InfiniBand", "Ethernet", NULL };
	static const int layer_codes[] = { 1, 2 };
	static const char *const widths[] = { "1x", "4x", "8x", "12x", "2x", NULL };
	static const int width_codes[] = { 1, 2, 4, 8, 16 };
	static const char *const speeds[] = { "SDR", "DDR", "QDR", "FDR10", "FDR",
					      "EDR", "HDR", "NDR", NULL };
	static const int speed_codes[] = { 1, 2, 4, 8, 16, 32, 64, 128 };
	static const char *const mtus[] = { "256", "512", "1024", "2048", "4096", NULL };
	static const int mtu_codes[] = { 1, 2, 3, 4, 5 };
	struct ibv_port_attr *a = (struct ibv_port_attr *)compat;
	a->state = (enum ibv_port_state)code_of(l, "state", states, state_codes, 4);
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = (enum ibv_mtu)code_of(l, "mtu", mtus, mtu_codes, 5);
	a->gid_tbl_len = (int)stub_opt_num(l, "gids", 128);
	a->port_cap_flags = 0x2659e848;
	a->max_msg_sz = 0x40000000;
	a->pkey_tbl_len = 128;
	a->lid = (uint16_t)stub_opt_num(l, "lid", 1 + s->index);
	a->sm_lid = 1;
	a->max_vl_num = 4;
	a->subnet_timeout = 18;
	a->active_width = (uint8_t)code_of(l, "width", widths, width_codes, 2);
	a->active_speed = (uint8_t)code_of(l, "speed", speeds, speed_codes, 128);
	a->phys_state = (uint8_t)code_of(l, "phys", phys, phys_codes, 5);
	a->link_layer = (uint8_t)code_of(l, "link_layer", layers, layer_codes, 1);
	a->flags = 0;
	stub_log(LIB, "ibv_query_port %s %u -> state %d", s->dev.name, port_num, a->state);
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct stub_context *sc = stub_context_of(context);
	if (!sc) {
		errno = EINVAL;
		return NULL;
	}
	struct stub_call c = { .call = "ibv_alloc_pd", .device = sc->sdev->dev.name, .len = -1 };
	if (scripted(&c)) {
		stub_log(LIB, "ibv_alloc_pd %s -> NULL errno %d", sc->sdev->dev.name, errno);
		return NULL;
	}
	struct ibv_pd *pd = calloc(1, sizeof *pd);
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->context = context;
	pthread_mutex_lock(&lock_);
	pd->handle = next_handle_++;
	pthread_mutex_unlock(&lock_);
	stub_log(LIB, "ibv_alloc_pd %s -> ok", sc->sdev->dev.name);
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	if (!pd)
		return EINVAL;
	free(pd);
	return 0;
}

/* What the memory at [addr, addr + len) is, from /proc/self/maps: "gpu" (the stand-in
 * libcuda's device memory, a mapping named /memfd:gdrstub-gpu), "host", or NULL when the range
 * is not mapped. */
static const char *memory_kind(uintptr_t addr, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return NULL;
	char line[4096];
	const char *kind = NULL;
	uintptr_t want = addr, end = addr + (len ? len : 1);
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		if (want < lo || want >= hi)
			continue;
		const char *k = strstr(line, "/memfd:gdrstub-gpu") ? "gpu" : "host";
		if (kind && strcmp(kind, k)) {
			kind = NULL;
			break;
		}
		kind = k;
		want = hi;
		if (want >= end)
			break;
	}
	fclose(f);
	return want >= end ? kind : NULL;
}

static struct ibv_mr *new_mr(struct ibv_pd *pd, void *addr, size_t len)
{
	struct ibv_mr *mr = calloc(1, sizeof *mr);
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	pthread_mutex_lock(&lock_);
	mr->handle = next_handle_++;
	mr->lkey = 0x1000 + mr->handle;
	mr->rkey = 0x2000 + mr->handle;
	pthread_mutex_unlock(&lock_);
	return mr;
}

/* ib_check_mr_access(): remote write or atomic needs local write; unknown bits are refused
 * (Linux include/rdma/ib_verbs.h:4290-4306). */
static int access_ok(int access)
{
	if ((access & (IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_WRITE)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return 0;
	return !(access & ~0x3fffffff);
}

/* The tracked MR kinds, so that ibv_dereg_mr gives back what ibv_reg_mr pinned. */
#define MR_PINNED 1

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct stub_context *sc = pd ? stub_context_of(pd->context) : NULL;
	if (!sc) {
		errno = EINVAL;
		return NULL;
	}
	const char *dev = sc->sdev->dev.name;
	const char *kind = memory_kind((uintptr_t)addr, length);
	struct stub_call c = {
		.call = "ibv_reg_mr", .device = dev, .mem = kind, .len = (long long)length
	};
	int e = 0;
	if (scripted(&c)) {
		e = errno;
	} else if (!access_ok(access) || !length) {
		e = EINVAL; /* ib_check_mr_access; umem.c:213-216 (npages == 0) */
	} else {
		/* `memlock BYTES`: the RLIMIT_MEMLOCK ib_umem_get() applies. 0 is EPERM
		 * (can_do_mlock() false: umem.c:186-187); more pinned than the limit is ENOMEM
		 * (umem.c:219-226). Checked before any page is pinned, as there. */
		const struct stub_line *ml = stub_nth("memlock", 0);
		if (ml) {
			if (!stub_word(ml, 1))
				stub_die("%s:%d: `memlock` needs a byte count", stub_path_, ml->no);
			long long limit = stub_num(ml, stub_word(ml, 1));
			pthread_mutex_lock(&lock_);
			long long want = pinned_ + (long long)length;
			pthread_mutex_unlock(&lock_);
			if (limit == 0)
				e = EPERM;
			else if (want > limit)
				e = ENOMEM;
		}
		/* Unmapped memory, and GPU memory that no peer-memory client claims, cannot be
		 * pinned: pin_user_pages_fast() (umem.c:235) fails with EFAULT on a VM_IO /
		 * VM_PFNMAP mapping (mm/gup.c:1069-1070) or no mapping at all. `peer_memory yes`
		 * (the default) plays nvidia-peermem, which claims GPU memory. */
		const struct stub_line *pm = stub_nth("peer_memory", 0);
		int peer = !pm || (stub_word(pm, 1) && !strcmp(stub_word(pm, 1), "yes"));
		if (!e && (!kind || (!strcmp(kind, "gpu") && !peer)))
			e = EFAULT;
	}
	if (e) {
		stub_log(LIB, "ibv_reg_mr %s %s %zu -> NULL errno %d", dev, kind ? kind : "unmapped",
			 length, e);
		errno = e;
		return NULL;
	}
	struct ibv_mr *mr = new_mr(pd, addr, length);
	if (mr) {
		pthread_mutex_lock(&lock_);
		pinned_ += (long long)length;
		pthread_mutex_unlock(&lock_);
		/* handle's top bit marks a pinned MR for ibv_dereg_mr. */
		mr->handle |= 0x80000000u;
	}
	stub_log(LIB, "ibv_reg_mr %s %s %zu -> ok", dev, kind, length);
	return mr;
}

/* The fd is a dma-buf of the stand-in libcuda (a memfd named gdrstub-dmabuf); its size in
 * bytes, -1 for another file. */
static long long dmabuf_size(int fd)
{
	char link[64], target[256];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof target - 1);
	if (n < 0)
		return -1;
	target[n] = 0;
	if (!strstr(target, "/memfd:gdrstub-dmabuf"))
		return -1;
	struct stat st;
	return fstat(fd, &st) ? -1 : (long long)st.st_size;
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
				 uint64_t iova, int fd, int access)
{
	struct stub_context *sc = pd ? stub_context_of(pd->context) : NULL;
	if (!sc) {
		errno = EINVAL;
		return NULL;
	}
	const char *dev = sc->sdev->dev.name;
	struct stub_call c = {
		.call = "ibv_reg_dmabuf_mr", .device = dev, .mem = "dmabuf", .len = (long long)length
	};
	/* The order of the real stack: the provider (rdma-core libibverbs/dummy_ops.c:602-607:
	 * EOPNOTSUPP), the kernel's uverbs method (EPROTONOSUPPORT: uverbs_ioctl.c:565-570, seen by
	 * rdma-core as libibverbs/cmd_fallback.c:104-111), the driver (uverbs_std_types_mr.c:200-201,
	 * mlx5 without ODP mr.c:1475-1477: EOPNOTSUPP): all scripted with `fail` lines, before
	 * the fd is looked at. Then ib_check_mr_access, then ib_umem_dmabuf_get(): dma_buf_get(fd)
	 * (umem_dmabuf.c:129) is EBADF for an fd that is not open and EINVAL for a file that is
	 * not a dma-buf (drivers/dma-buf/dma-buf.c:741-753), and a range past the dma-buf's end is
	 * EINVAL (umem_dmabuf.c:121, 133-134; a length of 0 too: :149-150). NCCL's probe (fd -1, length 0) therefore gets EBADF
	 * on a stack that supports dma-buf (NCCL src/transport/net_ib/gdr.cc:56-59). */
	int e = 0;
	long long size = -2;
	if (scripted(&c)) {
		e = errno;
	} else if (!access_ok(access)) {
		e = EINVAL;
	} else if (offset + length < offset) {
		e = EINVAL;
	} else if (fcntl(fd, F_GETFD) < 0) {
		e = EBADF;
	} else if ((size = dmabuf_size(fd)) < 0) {
		e = EINVAL;
	} else if ((long long)(offset + length) > size || !length) {
		e = EINVAL;
	}
	if (e) {
		stub_log(LIB, "ibv_reg_dmabuf_mr %s fd %d len %zu -> NULL errno %d", dev, fd, length,
			 e);
		errno = e;
		return NULL;
	}
	(void)iova;
	/* rdma-core records the offset as the MR's address (libibverbs/verbs.c:421-435). */
	struct ibv_mr *mr = new_mr(pd, (void *)(uintptr_t)offset, length);
	stub_log(LIB, "ibv_reg_dmabuf_mr %s fd %d len %zu -> ok", dev, fd, length);
	return mr;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	if (!mr)
		return EINVAL;
	if (mr->handle & 0x80000000u) {
		pthread_mutex_lock(&lock_);
		pinned_ -= (long long)mr->length;
		pthread_mutex_unlock(&lock_);
	}
	free(mr);
	return 0;
}
