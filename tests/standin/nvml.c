/* A stand-in libnvidia-ml.so.1 for tests/fast_check.rs: the GPUs of GDRDOCTOR_STANDIN_GPUS
 * with their compute modes, the driver of GDRDOCTOR_STANDIN_DRIVER. Everything else NVML has
 * is missing (nvml-wrapper reports a missing symbol as an error, which gdrdoctor keeps). */
#include "common.h"

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

static struct standin_gpu gpus[MAX_GPUS];
static int ngpus;

nvmlReturn_t nvmlInit_v2(void) { standin_log("nvml", "nvmlInit_v2"); ngpus = standin_gpus(gpus); return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
static nvmlReturn_t str(char *out, unsigned len, const char *s) {
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, s);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned len) { return str(v, len, standin_driver()); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned len) { return str(v, len, "13.580.159.04"); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 13000; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n) { *n = (unsigned)ngpus; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) {
    if (i >= (unsigned)ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *d = &gpus[i];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *d, nvmlPciInfo_t *p) {
    struct standin_gpu *g = d;
    memset(p, 0, sizeof *p);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "0000%s", g->bdf); /* NVML's 8-digit domain */
    memcpy(p->busId, tmp, sizeof p->busId - 1);
    memcpy(p->busIdLegacy, g->bdf, sizeof p->busIdLegacy - 1);
    p->pciDeviceId = 0x233510de;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(void *d, char *u, unsigned len) { return str(u, len, ((struct standin_gpu *)d)->uuid); }
nvmlReturn_t nvmlDeviceGetName(void *d, char *u, unsigned len) { (void)d; return str(u, len, "NVIDIA H200 (stand-in)"); }
nvmlReturn_t nvmlDeviceGetComputeMode(void *d, int *m) {
    const char *s = ((struct standin_gpu *)d)->mode;
    *m = !strcmp(s, "exclusive-process") ? 3 : !strcmp(s, "prohibited") ? 2 : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void *d, int *major, int *minor) { (void)d; *major = 9; *minor = 0; return NVML_SUCCESS; }
