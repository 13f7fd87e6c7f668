/* A stand-in libcuda.so.1 for tests/fast_check.rs: the GPUs of GDRDOCTOR_STANDIN_GPUS that
 * CUDA_VISIBLE_DEVICES (UUIDs or UUID prefixes, as CUDA reads it) lets through, with H200-like
 * attributes. The context-creating and allocating entry points exist only to be caught: they
 * log "FORBIDDEN" and fail. Issue 20 builds fuller stand-ins; this one is the minimum the
 * live-facts tests need. */
#include "common.h"
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101

static struct standin_gpu visible[MAX_GPUS];
static int nvisible = -1;

static int allowed(const struct standin_gpu *g) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v) return 1;
    char buf[4096];
    strncpy(buf, v, sizeof buf - 1);
    buf[sizeof buf - 1] = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (*tok && strncmp(g->uuid, tok, strlen(tok)) == 0) return 1;
    return 0;
}

CUresult cuInit(unsigned flags) {
    (void)flags;
    standin_log("cuda", "cuInit");
    /* A slow first cuInit (an idle GPU's UVM registration), when a test asks for one. */
    const char *ms = getenv("GDRDOCTOR_STANDIN_CUINIT_MS");
    if (ms) usleep((useconds_t)atoi(ms) * 1000);
    struct standin_gpu all[MAX_GPUS];
    int n = standin_gpus(all);
    nvisible = 0;
    for (int i = 0; i < n; i++)
        if (allowed(&all[i])) visible[nvisible++] = all[i];
    return nvisible ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

#define NEED_INIT() do { if (nvisible < 0) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define NEED_DEV(d) do { NEED_INIT(); if ((d) < 0 || (d) >= nvisible) return CUDA_ERROR_INVALID_DEVICE; } while (0)

CUresult cuDriverGetVersion(int *v) { standin_log("cuda", "cuDriverGetVersion"); *v = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *n) { standin_log("cuda", "cuDeviceGetCount"); NEED_INIT(); *n = nvisible; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { NEED_DEV(ordinal); *d = ordinal; return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    NEED_DEV(d);
    switch (attr) {
    case 16: *v = 132; break;   /* multiprocessors */
    case 75: *v = 9; break;     /* compute capability major */
    case 76: *v = 0; break;     /* minor */
    case 118: *v = 100; break;  /* GDR writes ordering: owner */
    default: *v = 1; break;     /* GDR, dma-buf, VMM, ...: supported */
    }
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { NEED_DEV(d); snprintf(name, (size_t)len, "NVIDIA H200 (stand-in)"); return CUDA_SUCCESS; }
CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d) { NEED_DEV(d); snprintf(bus, (size_t)len, "%s", visible[d].bdf); return CUDA_SUCCESS; }
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { NEED_DEV(d); *b = (size_t)150109880320ULL; return CUDA_SUCCESS; }
CUresult cuDeviceCanAccessPeer(int *v, CUdevice a, CUdevice b) { NEED_DEV(a); NEED_DEV(b); *v = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGetP2PAttribute(int *v, int attr, CUdevice a, CUdevice b) { NEED_DEV(a); NEED_DEV(b); *v = attr == 1 ? 0 : 1; return CUDA_SUCCESS; }

/* Never to be called by `check`. */
#define FORBIDDEN(name, ...) CUresult name(__VA_ARGS__) { standin_log("cuda", "FORBIDDEN " #name); return CUDA_ERROR_INVALID_VALUE; }
FORBIDDEN(cuCtxCreate_v2, void *c, unsigned f, CUdevice d)
FORBIDDEN(cuCtxCreate_v3, void *c, void *p, int n, unsigned f, CUdevice d)
FORBIDDEN(cuCtxCreate_v4, void *c, void *p, unsigned f, CUdevice d)
FORBIDDEN(cuDevicePrimaryCtxRetain, void *c, CUdevice d)
FORBIDDEN(cuCtxSetCurrent, void *c)
FORBIDDEN(cuCtxPushCurrent_v2, void *c)
FORBIDDEN(cuMemAlloc_v2, void *p, size_t n)
FORBIDDEN(cuMemAllocManaged, void *p, size_t n, unsigned f)
FORBIDDEN(cuMemHostAlloc, void *p, size_t n, unsigned f)
FORBIDDEN(cuMemCreate, void *h, size_t n, void *prop, unsigned long long f)
