/* Stand-in libcuda.so.1: the CUDA driver API calls gdrdoctor makes, with the driver's
 * semantics where gdrdoctor depends on them, and the GPU played by host threads.
 *
 * - GPUs: one per `gpu` line (bdf, name, cc, sms, mem, and the attributes gdrdoctor reads:
 *   gdr, dmabuf, flush, ordering, vmm_gdr, host_register, host_ptr, vmm). No `gpu` line: cuInit
 *   succeeds and cuDeviceGetCount says 0.
 * - Device memory is host memory: cuMemAlloc maps a memfd named `gdrstub-gpu`, which the
 *   stand-in libibverbs recognises as GPU memory (only a peer-memory client can pin it).
 *   cuMemGetHandleForAddressRange exports a range as a memfd named `gdrstub-dmabuf` of the
 *   range's size: the stand-in's dma-buf. Mapped and registered host memory is addressed by the
 *   "GPU" at its host address (unified addressing).
 * - Kernels: cuModuleLoadData accepts any image; cuModuleGetFunction knows the doorbell
 *   kernels of kernels/doorbell.cu (db_layouts, db_ring, db_poke) and runs each launch on a
 *   host thread that does what the kernel does, with release/acquire atomics. A kernel pointer
 *   outside the memory the "GPU" was given does not write: the stream reports
 *   CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronisation, as a real GPU fault does.
 * - CUDA_VISIBLE_DEVICES, read by cuInit as CUDA reads it: a comma-separated list of GPU
 *   UUIDs (or their prefixes: each `gpu` line's `uuid=`, the same NVML reports) or indices of
 *   `gpu` lines, in the order given; the list ends at the first entry that names no GPU.
 *   Unset: every GPU. The ordinals are those of the visible GPUs.
 * - `cuda init_ms=N`: cuInit takes N ms (the first CUDA client of an idle GPU).
 * - Failures: `fail CALL [type=T] [min_len=N] result=CUDA_ERROR_...` (names only: gdrdoctor's
 *   bindings are a Rust enum of CUDA 12.4's codes, and the stand-in never hands back a code
 *   outside it); `hang libcuda [once]` wedges dlopen.
 * - `forbid CALL...` (`contexts`: every call that creates or makes current a context, or
 *   allocates): a named call logs `FORBIDDEN <call>` and fails with CUDA_ERROR_INVALID_VALUE,
 *   for the tests of a command that must never make one (this and the visible GPUs:
 *   cuda_gpus.h).
 *
 * The soname is libcuda.so, not libcuda.so.1: gdrdoctor's test override preloads this file by
 * path, and the CUDA bindings (cudarc) then dlopen "libcuda.so" first, which the dynamic loader
 * resolves by soname to the library already loaded, before any search of the system's paths.
 *
 * Every call is logged (GDRDOCTOR_STUB_LOG): a test can prove which calls a command made,
 * e.g. that `check` never creates a context (cuDevicePrimaryCtxRetain). */
#include "stub.h"
#include "stream_stub.h"

#include <sched.h>
#include <sys/mman.h>

#define LIB "libcuda"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct stub_ctx *CUcontext;
typedef struct stub_module *CUmodule;
typedef struct stub_function *CUfunction;
typedef struct stub_stream *CUstream;
typedef struct stub_event *CUevent;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713
#define CUDA_ERROR_NOT_SUPPORTED 801

/* The codes a scenario may name: all in CUDA 12.4's cudaError_enum. */
static const struct {
	const char *name;
	int code;
} results_[] = {
	{ "CUDA_SUCCESS", 0 },
	{ "CUDA_ERROR_INVALID_VALUE", 1 },
	{ "CUDA_ERROR_OUT_OF_MEMORY", 2 },
	{ "CUDA_ERROR_NOT_INITIALIZED", 3 },
	{ "CUDA_ERROR_DEINITIALIZED", 4 },
	{ "CUDA_ERROR_STUB_LIBRARY", 34 },
	{ "CUDA_ERROR_DEVICE_UNAVAILABLE", 46 },
	{ "CUDA_ERROR_NO_DEVICE", 100 },
	{ "CUDA_ERROR_INVALID_DEVICE", 101 },
	{ "CUDA_ERROR_INVALID_IMAGE", 200 },
	{ "CUDA_ERROR_INVALID_CONTEXT", 201 },
	{ "CUDA_ERROR_INVALID_PTX", 218 },
	{ "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 222 },
	{ "CUDA_ERROR_OPERATING_SYSTEM", 304 },
	{ "CUDA_ERROR_INVALID_HANDLE", 400 },
	{ "CUDA_ERROR_NOT_FOUND", 500 },
	{ "CUDA_ERROR_ILLEGAL_ADDRESS", 700 },
	{ "CUDA_ERROR_LAUNCH_FAILED", 719 },
	{ "CUDA_ERROR_NOT_PERMITTED", 800 },
	{ "CUDA_ERROR_NOT_SUPPORTED", 801 },
	{ "CUDA_ERROR_SYSTEM_NOT_READY", 802 },
	{ "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 803 },
	{ "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 804 },
	{ "CUDA_ERROR_UNKNOWN", 999 },
};

/* The device attributes the stand-in answers, by the scenario's option name, with their
 * CUdevice_attribute numbers (tests/stand_ins/ checks them against the bindings through
 * gdrstub_cuda_attribute) and the value a `gpu` line without the option gets. */
static const struct {
	const char *option;
	int attribute;
	int dflt;
} attributes_[] = {
	{ "sms", 16, 132 },	      /* MULTIPROCESSOR_COUNT */
	{ "cc_major", 75, 9 },	      /* COMPUTE_CAPABILITY_MAJOR (from cc=) */
	{ "cc_minor", 76, 0 },	      /* COMPUTE_CAPABILITY_MINOR (from cc=) */
	{ "host_ptr", 91, 1 },	      /* CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM */
	{ "host_register", 99, 1 },   /* HOST_REGISTER_SUPPORTED */
	{ "vmm", 102, 1 },	      /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
	{ "vmm_gdr", 110, 1 },	      /* GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED */
	{ "gdr", 116, 1 },	      /* GPU_DIRECT_RDMA_SUPPORTED */
	{ "flush", 117, 1 },	      /* GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS */
	{ "ordering", 118, 100 },     /* GPU_DIRECT_RDMA_WRITES_ORDERING */
	{ "dmabuf", 124, 1 },	      /* DMA_BUF_SUPPORTED */
};

/* For the tests: the attribute number the stand-in answers for an option, -1 if none. */
__attribute__((visibility("default"))) int gdrstub_cuda_attribute(const char *option)
{
	for (size_t i = 0; i < sizeof attributes_ / sizeof attributes_[0]; i++)
		if (!strcmp(attributes_[i].option, option))
			return attributes_[i].attribute;
	return -1;
}

/* For the tests: the code of a CUresult name the scenario may use, -1 if none. */
__attribute__((visibility("default"))) int gdrstub_cuda_result(const char *name)
{
	for (size_t i = 0; i < sizeof results_ / sizeof results_[0]; i++)
		if (!strcmp(results_[i].name, name))
			return results_[i].code;
	return -1;
}

#define MAX_GPUS 64

struct stub_ctx {
	int ordinal;
};

enum region_kind { DEVICE, MANAGED, HOST_ALLOC, HOST_REGISTERED };

struct region {
	uintptr_t start;
	size_t len;
	enum region_kind kind;
	int ordinal;
	struct region *next;
};

struct stub_module {
	int loaded;
};

struct stub_function {
	const char *name;
};


struct stub_event {
	int unused;
};

static struct stub_ctx ctxs_[MAX_GPUS];
static int initialised_;
static __thread struct stub_ctx *current_;
static pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
static struct region *regions_;

#include "cuda_gpus.h"

__attribute__((constructor)) static void on_load(void)
{
	stub_maybe_hang(LIB);
}

static CUresult result_of(const struct stub_line *l, const char *name)
{
	for (size_t i = 0; i < sizeof results_ / sizeof results_[0]; i++)
		if (!strcmp(results_[i].name, name))
			return results_[i].code;
	stub_die("%s:%d: `%s` is not a CUresult name the stand-in may return", stub_path_,
		 l ? l->no : 0, name);
}

/* The result a matching `fail` line scripts for this call, or CUDA_SUCCESS. */
static CUresult scripted(const char *call, const char *type, long long len)
{
	struct stub_call c = { .call = call, .type = type, .len = len };
	const struct stub_line *l = stub_fail(&c);
	if (!l)
		return CUDA_SUCCESS;
	const char *r = stub_opt(l, "result");
	if (!r)
		stub_die("%s:%d: `fail %s` needs result=", stub_path_, l->no, call);
	return result_of(l, r);
}

static const struct stub_line *cuda_line(void)
{
	return stub_nth("cuda", 0);
}

#define LOGRET(r, ...)                                                                   \
	do {                                                                             \
		CUresult r_ = (r);                                                        \
		stub_log(LIB, __VA_ARGS__);                                               \
		return r_;                                                                \
	} while (0)

CUresult cuInit(unsigned int flags)
{
	long long ms = stub_opt_num(cuda_line(), "init_ms", 0);
	if (ms > 0)
		usleep((useconds_t)ms * 1000);
	CUresult r = scripted("cuInit", NULL, -1);
	if (r == CUDA_SUCCESS && flags != 0)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS) {
		set_visible();
		pthread_mutex_lock(&lock_);
		initialised_ = 1;
		pthread_mutex_unlock(&lock_);
	}
	LOGRET(r, "cuInit %u -> %d", flags, r);
}

static CUresult need_init(void)
{
	pthread_mutex_lock(&lock_);
	int ok = initialised_;
	pthread_mutex_unlock(&lock_);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = (int)stub_opt_num(cuda_line(), "driver", 13000);
	LOGRET(CUDA_SUCCESS, "cuDriverGetVersion -> %d", *version);
}

CUresult cuDeviceGetCount(int *count)
{
	CUresult r = need_init();
	if (r)
		return r;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = ngpus();
	LOGRET(CUDA_SUCCESS, "cuDeviceGetCount -> %d", *count);
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult r = need_init();
	if (r)
		return r;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= ngpus())
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

static CUresult check_device(CUdevice d)
{
	CUresult r = need_init();
	if (r)
		return r;
	return d >= 0 && d < ngpus() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice dev)
{
	CUresult r = check_device(dev);
	if (r)
		return r;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	const struct stub_line *l = gpu(dev);
	const char *cc = stub_opt(l, "cc");
	for (size_t i = 0; i < sizeof attributes_ / sizeof attributes_[0]; i++) {
		if (attributes_[i].attribute != attribute)
			continue;
		int v = (int)stub_opt_num(l, attributes_[i].option, attributes_[i].dflt);
		if (cc && attribute == 75)
			v = atoi(cc);
		if (cc && attribute == 76)
			v = strchr(cc, '.') ? atoi(strchr(cc, '.') + 1) : 0;
		*value = v;
		LOGRET(CUDA_SUCCESS, "cuDeviceGetAttribute %d gpu %d -> %d", attribute, dev, v);
	}
	/* An attribute this driver does not know. */
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev)
{
	CUresult r = check_device(dev);
	if (r)
		return r;
	if (!bus_id || len < 13)
		return CUDA_ERROR_INVALID_VALUE;
	const char *bdf = stub_opt(gpu(dev), "bdf");
	char dflt[16];
	snprintf(dflt, sizeof dflt, "0000:%02x:00.0", 0x18 + 0x10 * line_index(dev));
	snprintf(bus_id, (size_t)len, "%s", bdf ? bdf : dflt);
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult r = check_device(dev);
	if (r)
		return r;
	if (!name || len < 1)
		return CUDA_ERROR_INVALID_VALUE;
	const char *n = stub_opt(gpu(dev), "name");
	snprintf(name, (size_t)len, "%s", n ? n : "NVIDIA H200");
	/* Scenario words cannot hold spaces: `name=NVIDIA_H200` is shown as "NVIDIA H200". */
	for (char *p = name; *p; p++)
		if (*p == '_')
			*p = ' ';
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult r = check_device(dev);
	if (r)
		return r;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = (size_t)stub_opt_num(gpu(dev), "mem", 150754820096LL);
	return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	CUresult r = check_device(dev);
	if (!r)
		r = check_device(peer);
	if (r)
		return r;
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	*can = dev != peer && stub_opt_num(gpu(dev), "p2p", 0) && stub_opt_num(gpu(peer), "p2p", 0);
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetP2PAttribute(int *value, int attribute, CUdevice dev, CUdevice peer)
{
	int can = 0;
	CUresult r = cuDeviceCanAccessPeer(&can, dev, peer);
	if (r)
		return r;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	*value = attribute == 1 ? 0 : can; /* PERFORMANCE_RANK 0; supported flags as access */
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
	FORBID("cuDevicePrimaryCtxRetain");
	CUresult r = check_device(dev);
	if (!r)
		r = scripted("cuDevicePrimaryCtxRetain", NULL, -1);
	if (r)
		LOGRET(r, "cuDevicePrimaryCtxRetain gpu %d -> %d", dev, r);
	if (!ctx)
		return CUDA_ERROR_INVALID_VALUE;
	ctxs_[dev].ordinal = dev;
	*ctx = &ctxs_[dev];
	LOGRET(CUDA_SUCCESS, "cuDevicePrimaryCtxRetain gpu %d -> 0", dev);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult r = check_device(dev);
	LOGRET(r, "cuDevicePrimaryCtxRelease gpu %d -> %d", dev, r);
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
	FORBID("cuCtxSetCurrent");
	if (ctx && (ctx < ctxs_ || ctx >= ctxs_ + MAX_GPUS))
		return CUDA_ERROR_INVALID_CONTEXT;
	current_ = ctx;
	return CUDA_SUCCESS;
}

/* Context calls gdrdoctor never makes: there to be caught (`forbid`), else not supported. */
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev)
{
	(void)ctx, (void)flags, (void)dev;
	FORBID("cuCtxCreate");
	LOGRET(CUDA_ERROR_NOT_SUPPORTED, "cuCtxCreate_v2 -> 801");
}

CUresult cuCtxCreate_v3(CUcontext *ctx, void *params, int nparams, unsigned int flags,
			CUdevice dev)
{
	(void)ctx, (void)params, (void)nparams, (void)flags, (void)dev;
	FORBID("cuCtxCreate");
	LOGRET(CUDA_ERROR_NOT_SUPPORTED, "cuCtxCreate_v3 -> 801");
}

CUresult cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned int flags, CUdevice dev)
{
	(void)ctx, (void)params, (void)flags, (void)dev;
	FORBID("cuCtxCreate");
	LOGRET(CUDA_ERROR_NOT_SUPPORTED, "cuCtxCreate_v4 -> 801");
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	(void)ctx;
	FORBID("cuCtxPushCurrent");
	LOGRET(CUDA_ERROR_NOT_SUPPORTED, "cuCtxPushCurrent -> 801");
}

/* The current context's device (the stand-in libnccl asks, as NCCL asks cudaGetDevice). */
CUresult cuCtxGetDevice(CUdevice *device)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = current_->ordinal;
	return CUDA_SUCCESS;
}

CUresult cuCtxSetLimit(int limit, size_t value)
{
	(void)limit;
	(void)value;
	return current_ ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- memory ------------------------------------------------------------------------------ */

static void add_region(uintptr_t start, size_t len, enum region_kind kind)
{
	struct region *r = calloc(1, sizeof *r);
	if (!r)
		stub_die("out of memory");
	r->start = start;
	r->len = len;
	r->kind = kind;
	r->ordinal = current_ ? current_->ordinal : -1;
	pthread_mutex_lock(&lock_);
	r->next = regions_;
	regions_ = r;
	pthread_mutex_unlock(&lock_);
}

/* The region holding [p, p + len) (of `kind`, or any kind when kind < 0); a copy. */
static int find_region(uintptr_t p, size_t len, int kind, struct region *out)
{
	int found = 0;
	pthread_mutex_lock(&lock_);
	for (struct region *r = regions_; r; r = r->next)
		if ((kind < 0 || (int)r->kind == kind) && p >= r->start && p + len >= p &&
		    p + len <= r->start + r->len) {
			*out = *r;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&lock_);
	return found;
}

/* Remove the region starting exactly at p (of `kind`); 1 when there was one. */
static int remove_region(uintptr_t p, int kind, struct region *out)
{
	int found = 0;
	pthread_mutex_lock(&lock_);
	for (struct region **rr = &regions_; *rr; rr = &(*rr)->next)
		if ((*rr)->start == p && (int)(*rr)->kind == kind) {
			struct region *r = *rr;
			*rr = r->next;
			*out = *r;
			free(r);
			found = 1;
			break;
		}
	pthread_mutex_unlock(&lock_);
	return found;
}

static void *map_memfd(const char *name, size_t len, int *fd_out)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (ftruncate(fd, (off_t)len)) {
		close(fd);
		return NULL;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	if (fd_out)
		*fd_out = fd;
	else
		close(fd);
	return p;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	FORBID("cuMemAlloc");
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = scripted("cuMemAlloc", NULL, (long long)bytes);
	if (r)
		LOGRET(r, "cuMemAlloc %zu -> %d", bytes, r);
	/* Device memory: a mapping the stand-in libibverbs can tell from host memory. */
	void *p = map_memfd("gdrstub-gpu", bytes, NULL);
	if (!p)
		LOGRET(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc %zu -> 2", bytes);
	add_region((uintptr_t)p, bytes, DEVICE);
	*dptr = (CUdeviceptr)(uintptr_t)p;
	LOGRET(CUDA_SUCCESS, "cuMemAlloc %zu -> 0", bytes);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
	(void)flags;
	FORBID("cuMemAllocManaged");
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = scripted("cuMemAllocManaged", NULL, (long long)bytes);
	if (r)
		LOGRET(r, "cuMemAllocManaged %zu -> %d", bytes, r);
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	add_region((uintptr_t)p, bytes, MANAGED);
	*dptr = (CUdeviceptr)(uintptr_t)p;
	LOGRET(CUDA_SUCCESS, "cuMemAllocManaged %zu -> 0", bytes);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct region r;
	if (!remove_region((uintptr_t)dptr, DEVICE, &r) &&
	    !remove_region((uintptr_t)dptr, MANAGED, &r))
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)r.start, r.len);
	return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dptr, unsigned char value, size_t n)
{
	struct region r;
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!find_region((uintptr_t)dptr, n, DEVICE, &r) &&
	    !find_region((uintptr_t)dptr, n, MANAGED, &r))
		return CUDA_ERROR_INVALID_VALUE;
	memset((void *)(uintptr_t)dptr, value, n);
	return CUDA_SUCCESS;
}

CUresult cuMemsetD32_v2(CUdeviceptr dptr, unsigned int value, size_t n)
{
	struct region r;
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (n > SIZE_MAX / 4 || (!find_region((uintptr_t)dptr, n * 4, DEVICE, &r) &&
				 !find_region((uintptr_t)dptr, n * 4, MANAGED, &r)))
		return CUDA_ERROR_INVALID_VALUE;
	uint32_t *p = (uint32_t *)(uintptr_t)dptr;
	for (size_t i = 0; i < n; i++)
		p[i] = value;
	return CUDA_SUCCESS;
}

/* Synchronous, as the driver's: device memory is host memory here. */
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	struct region r;
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!dst || (!find_region((uintptr_t)src, n, DEVICE, &r) &&
		     !find_region((uintptr_t)src, n, MANAGED, &r)))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

/* cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1). The range must lie
 * in one cuMemAlloc allocation and be aligned to the host page; managed memory is refused with
 * CUDA_ERROR_INVALID_VALUE, as the R580 driver does on our H200
 * (fixtures/reports/h200-probe-registration.json, step dmabuf-export-managed); a GPU without
 * dma-buf (`dmabuf=0`) is CUDA_ERROR_NOT_SUPPORTED. */
CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size, int type,
				       unsigned long long flags)
{
	long page = sysconf(_SC_PAGESIZE);
	struct region r;
	CUresult res = CUDA_SUCCESS;
	if (!current_)
		res = CUDA_ERROR_INVALID_CONTEXT;
	else if (!handle || type != 1 || flags)
		res = CUDA_ERROR_INVALID_VALUE;
	else if (!stub_opt_num(gpu(current_->ordinal), "dmabuf", 1))
		res = CUDA_ERROR_NOT_SUPPORTED;
	else if ((res = scripted("cuMemGetHandleForAddressRange", NULL, (long long)size)))
		;
	else if (!find_region((uintptr_t)dptr, size, DEVICE, &r) || !size ||
		 (dptr % (CUdeviceptr)page) || (size % (size_t)page))
		res = CUDA_ERROR_INVALID_VALUE;
	if (res)
		LOGRET(res, "cuMemGetHandleForAddressRange %zu -> %d", size, res);
	int fd = memfd_create("gdrstub-dmabuf", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size)) {
		if (fd >= 0)
			close(fd);
		LOGRET(CUDA_ERROR_OUT_OF_MEMORY, "cuMemGetHandleForAddressRange %zu -> 2", size);
	}
	*(int *)handle = fd;
	LOGRET(CUDA_SUCCESS, "cuMemGetHandleForAddressRange %zu -> fd %d", size, fd);
}

CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
	(void)flags;
	FORBID("cuMemHostAlloc");
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!pp || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	add_region((uintptr_t)p, bytes, HOST_ALLOC);
	*pp = p;
	return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void *p)
{
	struct region r;
	if (!remove_region((uintptr_t)p, HOST_ALLOC, &r))
		return CUDA_ERROR_INVALID_VALUE;
	munmap(p, r.len);
	return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned int flags)
{
	struct region r;
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!dptr || flags)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult res = scripted("cuMemHostGetDevicePointer", NULL, -1);
	if (res)
		LOGRET(res, "cuMemHostGetDevicePointer -> %d", res);
	if (!find_region((uintptr_t)p, 1, HOST_ALLOC, &r) &&
	    !find_region((uintptr_t)p, 1, HOST_REGISTERED, &r))
		return CUDA_ERROR_INVALID_VALUE;
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* Flags: PORTABLE 0x01, DEVICEMAP 0x02, IOMEMORY 0x04 (a NIC's MMIO page: `type=iomemory`
 * selects it, e.g. `fail cuMemHostRegister type=iomemory result=CUDA_ERROR_NOT_PERMITTED`,
 * what the driver returns without PeerMappingOverride). */
CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
	struct region r;
	FORBID("cuMemHostRegister");
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!p || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	const char *type = (flags & 0x04) ? "iomemory" : "host";
	CUresult res = scripted("cuMemHostRegister", type, (long long)bytes);
	if (!res && find_region((uintptr_t)p, 1, HOST_REGISTERED, &r))
		res = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if (res)
		LOGRET(res, "cuMemHostRegister %s %zu -> %d", type, bytes, res);
	add_region((uintptr_t)p, bytes, HOST_REGISTERED);
	LOGRET(CUDA_SUCCESS, "cuMemHostRegister %s %zu -> 0", type, bytes);
}

/* Virtual memory management: gdrdoctor allocates with cuMemAlloc. */
CUresult cuMemCreate(void *handle, size_t bytes, const void *prop, unsigned long long flags)
{
	(void)handle, (void)prop, (void)flags;
	FORBID("cuMemCreate");
	LOGRET(CUDA_ERROR_NOT_SUPPORTED, "cuMemCreate %zu -> 801", bytes);
}

CUresult cuMemHostUnregister(void *p)
{
	struct region r;
	if (!remove_region((uintptr_t)p, HOST_REGISTERED, &r))
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	return CUDA_SUCCESS;
}

/* ---- streams, events, modules ------------------------------------------------------------- */

CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	(void)flags;
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	*s = calloc(1, sizeof **s);
	return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Wait for the stream's kernel; its error (an illegal address) is reported once. */
static CUresult join(struct stub_stream *s)
{
	if (s->running) {
		pthread_join(s->thread, NULL);
		s->running = 0;
	}
	CUresult e = s->error;
	s->error = CUDA_SUCCESS;
	return e;
}

CUresult cuStreamSynchronize(CUstream s)
{
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	return join(s);
}

CUresult cuStreamQuery(CUstream s)
{
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	if (s->running && !__atomic_load_n(&s->done, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_READY;
	return join(s);
}

CUresult cuStreamDestroy_v2(CUstream s)
{
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	join(s);
	free(s);
	return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
	return current_ ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
	(void)flags;
	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	*e = calloc(1, sizeof **e);
	return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuEventDestroy_v2(CUevent e)
{
	free(e);
	return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!m || !image)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = scripted("cuModuleLoadData", NULL, -1);
	if (r)
		LOGRET(r, "cuModuleLoadData -> %d", r);
	*m = calloc(1, sizeof **m);
	if (!*m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	(*m)->loaded = 1;
	LOGRET(CUDA_SUCCESS, "cuModuleLoadData -> 0");
}

CUresult cuModuleUnload(CUmodule m)
{
	free(m);
	return CUDA_SUCCESS;
}

static const char *const kernels_[] = { "db_layouts", "db_ring", "db_poke", NULL };

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	if (!f || !m || !name)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; kernels_[i]; i++)
		if (!strcmp(kernels_[i], name)) {
			*f = calloc(1, sizeof **f);
			if (!*f)
				return CUDA_ERROR_OUT_OF_MEMORY;
			(*f)->name = kernels_[i];
			return CUDA_SUCCESS;
		}
	LOGRET(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction %s -> 500", name);
}

/* ---- the doorbell kernels, on a host thread (kernels/doorbell.cu) --------------------------- */

struct launch {
	const char *name;
	uint64_t a[6];
	struct stub_stream *stream;
};

/* The "GPU" may touch [p, p + len) only in memory it was given (device, managed, mapped or
 * registered host memory). */
static int addressable(uint64_t p, size_t len)
{
	struct region r;
	return find_region((uintptr_t)p, len, -1, &r);
}

static void store_release(uint64_t addr, uint64_t v)
{
	__atomic_store_n((uint64_t *)(uintptr_t)addr, v, __ATOMIC_RELEASE);
}

/* db_layouts(u64 *bar, const Layout *layouts, u32 n, u32 *info): Layout is four u64 (unit,
 * page_id, reg_offset, half). */
static CUresult run_layouts(const uint64_t *a)
{
	uint64_t bar = a[0], tbl = a[1], info = a[3];
	uint32_t n = (uint32_t)a[2];
	if (!addressable(tbl, (size_t)n * 32) || !addressable(info, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	__atomic_store_n((uint32_t *)(uintptr_t)info, 1, __ATOMIC_RELEASE); /* st.mmio present */
	for (uint32_t i = 0; i < n; i++) {
		const uint64_t *l = (const uint64_t *)(uintptr_t)(tbl + (uint64_t)i * 32);
		uint64_t off = l[1] * l[0] + (l[2] % 4096);
		if (!addressable(bar + off, 8))
			return CUDA_ERROR_ILLEGAL_ADDRESS;
		store_release(bar + off, i + 1);
		if (l[3]) {
			if (!addressable(bar + (off ^ l[3]), 8))
				return CUDA_ERROR_ILLEGAL_ADDRESS;
			store_release(bar + (off ^ l[3]), i + 1 + 0x100);
		}
	}
	return CUDA_SUCCESS;
}

/* db_ring(u64 *go, u64 *payload, u64 *db, u32 n, u32 flavour, u32 *abort) */
static CUresult run_ring(const uint64_t *a)
{
	uint64_t go = a[0], payload = a[1], db = a[2], abort_flag = a[5];
	uint32_t n = (uint32_t)a[3], flavour = (uint32_t)a[4];
	if (!addressable(go, 8) || !addressable(payload, 64) || !addressable(db, 8) ||
	    !addressable(abort_flag, 4))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	for (uint32_t i = 1; i <= n; i++) {
		uint32_t polls = 0;
		while (__atomic_load_n((uint64_t *)(uintptr_t)go, __ATOMIC_ACQUIRE) != i) {
			if ((++polls & 1023u) == 0) {
				if (__atomic_load_n((uint32_t *)(uintptr_t)abort_flag, __ATOMIC_ACQUIRE))
					return CUDA_SUCCESS;
				sched_yield();
			}
		}
		if (flavour != 5)
			for (int k = 0; k < 8; k++)
				store_release(payload + 8 * (uint64_t)k, i);
		store_release(db, i);
	}
	return CUDA_SUCCESS;
}

static void *kernel_thread(void *arg)
{
	struct launch *l = arg;
	CUresult r = CUDA_SUCCESS;
	if (!strcmp(l->name, "db_layouts"))
		r = run_layouts(l->a);
	else if (!strcmp(l->name, "db_ring"))
		r = run_ring(l->a);
	else if (!strcmp(l->name, "db_poke"))
		r = addressable(l->a[0], 8) ? (store_release(l->a[0], l->a[1]), CUDA_SUCCESS)
					    : CUDA_ERROR_ILLEGAL_ADDRESS;
	if (r) {
		stub_log(LIB, "kernel %s -> %d", l->name, r);
		l->stream->error = r;
	}
	__atomic_store_n(&l->stream->done, 1, __ATOMIC_RELEASE);
	free(l);
	return NULL;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
			CUstream s, void **params, void **extra)
{
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)extra;
	if (!current_)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!f || !s || !params)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = scripted("cuLaunchKernel", f->name, -1);
	if (r)
		LOGRET(r, "cuLaunchKernel %s -> %d", f->name, r);
	/* A previous kernel on the stream finishes first (stream order); its error is sticky
	 * until the next synchronisation, as a fault is. */
	CUresult prev = s->error;
	join(s);
	struct launch *l = calloc(1, sizeof *l);
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->name = f->name;
	l->stream = s;
	/* Parameter widths per kernel (kernels/doorbell.cu): u32 where the kernel takes one. */
	static const struct {
		const char *name;
		const char *widths;
	} sig[] = {
		{ "db_layouts", "8848" },
		{ "db_ring", "888448" },
		{ "db_poke", "88" },
	};
	for (size_t k = 0; k < sizeof sig / sizeof sig[0]; k++) {
		if (strcmp(sig[k].name, f->name))
			continue;
		for (size_t i = 0; sig[k].widths[i]; i++)
			l->a[i] = sig[k].widths[i] == '8' ? *(uint64_t *)params[i]
							   : *(uint32_t *)params[i];
	}
	s->error = prev;
	__atomic_store_n(&s->done, 0, __ATOMIC_RELEASE);
	if (pthread_create(&s->thread, NULL, kernel_thread, l)) {
		free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	s->running = 1;
	LOGRET(CUDA_SUCCESS, "cuLaunchKernel %s -> 0", f->name);
}
