/* Stand-in libnvidia-ml.so.1: the NVML calls of gdrdoctor's live facts that answer the
 * questions tests ask (initialisation, the GPU list, PCI addresses, names, memory, BAR1,
 * persistence). Every other NVML symbol is absent, which gdrdoctor reports per GPU as an NVML
 * error (nvml-wrapper looks each symbol up on first use). Struct layouts are nvml.h's, as
 * nvml-wrapper-sys declares them.
 *
 * Scenario: the `gpu` lines (shared with the stand-in libcuda: bdf, name, mem, bar1,
 * persistence, uuid, mode, fabric, fabric_status, clique), `nvml [driver=580.159.04] [cuda=13000]
 * [attach_ms=0] [gpu_ms=0]`, `fail nvmlInit result=NVML_ERROR_...`
 * (names only), `hang libnvidia-ml [once]`. */
#include "stub.h"

#define LIB "libnvidia-ml"

typedef int nvmlReturn_t;
typedef struct stub_nvml_device *nvmlDevice_t;

typedef struct {
	char busIdLegacy[16];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

typedef struct {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
	unsigned long long bar1Total;
	unsigned long long bar1Free;
	unsigned long long bar1Used;
} nvmlBAR1Memory_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7

static const struct {
	const char *name;
	int code;
} results_[] = {
	{ "NVML_SUCCESS", 0 },
	{ "NVML_ERROR_UNINITIALIZED", 1 },
	{ "NVML_ERROR_INVALID_ARGUMENT", 2 },
	{ "NVML_ERROR_NOT_SUPPORTED", 3 },
	{ "NVML_ERROR_NO_PERMISSION", 4 },
	{ "NVML_ERROR_NOT_FOUND", 6 },
	{ "NVML_ERROR_DRIVER_NOT_LOADED", 9 },
	{ "NVML_ERROR_TIMEOUT", 10 },
	{ "NVML_ERROR_IRQ_ISSUE", 11 },
	{ "NVML_ERROR_LIBRARY_NOT_FOUND", 12 },
	{ "NVML_ERROR_GPU_IS_LOST", 15 },
	{ "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18 },
	{ "NVML_ERROR_UNKNOWN", 999 },
};

#define MAX_GPUS 64

struct stub_nvml_device {
	int index;
};

static struct stub_nvml_device devices_[MAX_GPUS];
static int initialised_;
static pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void on_load(void)
{
	stub_maybe_hang(LIB);
}

static nvmlReturn_t scripted(const char *call)
{
	struct stub_call c = { .call = call, .len = -1 };
	const struct stub_line *l = stub_fail(&c);
	if (!l)
		return NVML_SUCCESS;
	const char *r = stub_opt(l, "result");
	if (!r)
		stub_die("%s:%d: `fail %s` needs result=", stub_path_, l->no, call);
	for (size_t i = 0; i < sizeof results_ / sizeof results_[0]; i++)
		if (!strcmp(results_[i].name, r))
			return results_[i].code;
	stub_die("%s:%d: `%s` is not an nvmlReturn_t name the stand-in knows", stub_path_, l->no,
		 r);
}

static int ngpus(void)
{
	int n = stub_count("gpu");
	return n > MAX_GPUS ? MAX_GPUS : n;
}

static nvmlReturn_t ready(void)
{
	pthread_mutex_lock(&lock_);
	int ok = initialised_ > 0;
	pthread_mutex_unlock(&lock_);
	return ok ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

static const struct stub_line *gpu_of(nvmlDevice_t d)
{
	if (!d || d < devices_ || d >= devices_ + MAX_GPUS)
		return NULL;
	return stub_nth("gpu", d->index);
}

nvmlReturn_t nvmlInit_v2(void)
{
	nvmlReturn_t r = scripted("nvmlInit");
	if (!r) {
		pthread_mutex_lock(&lock_);
		initialised_++;
		pthread_mutex_unlock(&lock_);
	}
	stub_log(LIB, "nvmlInit -> %d", r);
	return r;
}

nvmlReturn_t nvmlShutdown(void)
{
	pthread_mutex_lock(&lock_);
	nvmlReturn_t r = initialised_ > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
	if (initialised_ > 0)
		initialised_--;
	pthread_mutex_unlock(&lock_);
	return r;
}

static nvmlReturn_t copy_out(char *dst, unsigned int len, const char *src)
{
	if (!dst)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(src) + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, src, strlen(src) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int len)
{
	nvmlReturn_t r = ready();
	if (r)
		return r;
	const char *v = stub_opt(stub_nth("nvml", 0), "driver");
	return copy_out(version, len, v ? v : "580.159.04");
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int len)
{
	nvmlReturn_t r = ready();
	if (r)
		return r;
	const char *v = stub_opt(stub_nth("nvml", 0), "driver");
	char buf[96];
	snprintf(buf, sizeof buf, "13.%s", v ? v : "580.159.04");
	return copy_out(version, len, buf);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	*version = (int)stub_opt_num(stub_nth("nvml", 0), "cuda", 13000);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = (unsigned int)ngpus();
	stub_log(LIB, "nvmlDeviceGetCount -> %u", *count);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!device || index >= (unsigned int)ngpus())
		return NVML_ERROR_INVALID_ARGUMENT;
	/* `nvml attach_ms=N`: the first handle of a GPU costs what attaching it costs the driver. */
	long long ms = stub_opt_num(stub_nth("nvml", 0), "attach_ms", 0);
	if (ms > 0)
		usleep((useconds_t)ms * 1000);
	devices_[index].index = (int)index;
	*device = &devices_[index];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	const struct stub_line *l = gpu_of(device);
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!l || !pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	const char *bdf = stub_opt(l, "bdf");
	char dflt[16];
	snprintf(dflt, sizeof dflt, "0000:%02x:00.0", 0x18 + 0x10 * device->index);
	if (!bdf)
		bdf = dflt;
	memset(pci, 0, sizeof *pci);
	unsigned int dom = 0, bus = 0, dev = 0, fn = 0;
	if (sscanf(bdf, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
		stub_die("%s:%d: bdf `%s` is not DDDD:BB:DD.F", stub_path_, l->no, bdf);
	pci->domain = dom;
	pci->bus = bus;
	pci->device = dev;
	pci->pciDeviceId = 0x233510de;
	pci->pciSubSystemId = 0x18bf10de;
	/* NVML's bus id has an eight-digit domain. */
	snprintf(pci->busId, sizeof pci->busId, "%08x:%02x:%02x.%x", dom, bus, dev, fn);
	snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int len)
{
	const struct stub_line *l = gpu_of(device);
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!l)
		return NVML_ERROR_INVALID_ARGUMENT;
	const char *n = stub_opt(l, "name");
	char buf[96];
	snprintf(buf, sizeof buf, "%s", n ? n : "NVIDIA H200");
	for (char *p = buf; *p; p++)
		if (*p == '_')
			*p = ' ';
	return copy_out(name, len, buf);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int len)
{
	const struct stub_line *l = gpu_of(device);
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!l)
		return NVML_ERROR_INVALID_ARGUMENT;
	char buf[96];
	stub_gpu_uuid(device->index, buf, sizeof buf);
	return copy_out(uuid, len, buf);
}

/* `mode=default|exclusive-thread|prohibited|exclusive-process`: NVML_COMPUTEMODE_* 0..3. */
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, int *mode)
{
	static const char *const modes[] = { "default", "exclusive-thread", "prohibited",
					     "exclusive-process" };
	const struct stub_line *l = gpu_of(device);
	nvmlReturn_t r = ready();
	if (!r && (!l || !mode))
		r = NVML_ERROR_INVALID_ARGUMENT;
	if (r)
		return r;
	const char *m = stub_opt(l, "mode");
	for (int i = 0; i < 4; i++)
		if (!strcmp(m ? m : "default", modes[i])) {
			*mode = i;
			return NVML_SUCCESS;
		}
	stub_die("%s:%d: `mode=%s` is not a compute mode", stub_path_, l->no, m);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m)
{
	const struct stub_line *l = gpu_of(device);
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!l || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	/* `nvml gpu_ms=N`: one GPU's queries cost N ms (charged here, once per GPU). */
	long long ms = stub_opt_num(stub_nth("nvml", 0), "gpu_ms", 0);
	if (ms > 0)
		usleep((useconds_t)ms * 1000);
	m->total = (unsigned long long)stub_opt_num(l, "mem", 150754820096LL);
	m->reserved = 0;
	m->used = 0;
	m->free = m->total;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *b)
{
	const struct stub_line *l = gpu_of(device);
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!l || !b)
		return NVML_ERROR_INVALID_ARGUMENT;
	b->bar1Total = (unsigned long long)stub_opt_num(l, "bar1", 256LL << 30);
	b->bar1Used = 5u << 20;
	b->bar1Free = b->bar1Total - b->bar1Used;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode)
{
	const struct stub_line *l = gpu_of(device);
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!l || !mode)
		return NVML_ERROR_INVALID_ARGUMENT;
	*mode = (int)stub_opt_num(l, "persistence", 1);
	return NVML_SUCCESS;
}

/* The GPU's NVLink fabric registration (issue 39): `gpu ... fabric=completed|in-progress|
 * not-started|not-supported [fabric_status=NVML_ERROR_...] [clique=N]`; without `fabric=` the
 * GPU is not in an NVSwitch fabric (state NOT_SUPPORTED), as a PCIe H200 answers.
 * nvmlGpuFabricInfo_v3_t's layout (nvml.h); the version field is checked as NVML does. */
typedef struct {
	unsigned int version;
	unsigned char clusterUuid[16];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
	unsigned int healthMask;
	unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;

typedef struct {
	unsigned char clusterUuid[16];
	nvmlReturn_t status;
	unsigned int cliqueId;
	unsigned char state;
} nvmlGpuFabricInfo_t;

static nvmlReturn_t fabric_of(nvmlDevice_t device, unsigned char *state, nvmlReturn_t *status,
			      unsigned int *clique)
{
	const struct stub_line *l = gpu_of(device);
	nvmlReturn_t r = ready();
	if (r)
		return r;
	if (!l)
		return NVML_ERROR_INVALID_ARGUMENT;
	const char *s = stub_opt(l, "fabric");
	static const char *names[] = { "not-supported", "not-started", "in-progress", "completed" };
	*state = 0;
	if (s) {
		int found = 0;
		for (unsigned char i = 0; i < 4; i++)
			if (!strcmp(s, names[i])) {
				*state = i;
				found = 1;
			}
		if (!found)
			stub_die("%s:%d: fabric=%s is not a fabric state", stub_path_, l->no, s);
	}
	*status = NVML_SUCCESS;
	const char *st = stub_opt(l, "fabric_status");
	if (st) {
		int found = 0;
		for (size_t i = 0; i < sizeof results_ / sizeof results_[0]; i++)
			if (!strcmp(results_[i].name, st)) {
				*status = results_[i].code;
				found = 1;
			}
		if (!found)
			stub_die("%s:%d: fabric_status=%s is not an nvmlReturn_t name", stub_path_,
				 l->no, st);
	}
	*clique = (unsigned int)stub_opt_num(l, "clique", 32766);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v3_t *info)
{
	nvmlReturn_t r = scripted("nvmlDeviceGetGpuFabricInfoV");
	if (r)
		return r;
	if (!info)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned int v = info->version >> 24;
	if (v != 2 && v != 3)
		return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
	unsigned char state;
	nvmlReturn_t status;
	unsigned int clique;
	r = fabric_of(device, &state, &status, &clique);
	if (r)
		return r;
	memset(info->clusterUuid, 0xab, sizeof info->clusterUuid);
	info->status = status;
	info->cliqueId = clique;
	info->state = state;
	info->healthMask = 0;
	if (v == 3)
		info->healthSummary = 0;
	stub_log(LIB, "nvmlDeviceGetGpuFabricInfoV v%u -> state %u status %d", v, state, status);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
	nvmlReturn_t r = scripted("nvmlDeviceGetGpuFabricInfo");
	if (r)
		return r;
	if (!info)
		return NVML_ERROR_INVALID_ARGUMENT;
	return fabric_of(device, &info->state, &info->status, &info->cliqueId);
}
