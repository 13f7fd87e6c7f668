/* Shared by the stand-in libcuda and libnvidia-ml of tests/fast_check.rs (issue 16).
 *
 * The GPUs come from GDRDOCTOR_STANDIN_GPUS: "BDF=UUID=MODE;BDF=UUID=MODE;..." with MODE one of
 * default, exclusive-process, prohibited. The driver version from GDRDOCTOR_STANDIN_DRIVER
 * (default 580.159.04). Every call is appended to the file GDRDOCTOR_STANDIN_LOG as
 * "<library> <function> CUDA_MPS_PIPE_DIRECTORY=<value> CUDA_VISIBLE_DEVICES=<value>" (or
 * "(unset)"), so that a test can see what a gdrdoctor run called, and in which environment. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16

struct standin_gpu {
    char bdf[32];
    char uuid[96];
    char mode[32];
};

static inline int standin_gpus(struct standin_gpu *out) {
    const char *s = getenv("GDRDOCTOR_STANDIN_GPUS");
    int n = 0;
    if (!s) return 0;
    char buf[4096];
    strncpy(buf, s, sizeof buf - 1);
    buf[sizeof buf - 1] = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ";", &save); tok && n < MAX_GPUS; tok = strtok_r(NULL, ";", &save)) {
        char *a = strchr(tok, '=');
        if (!a) continue;
        *a++ = 0;
        char *b = strchr(a, '=');
        if (b) *b++ = 0;
        snprintf(out[n].bdf, sizeof out[n].bdf, "%s", tok);
        snprintf(out[n].uuid, sizeof out[n].uuid, "%s", a);
        snprintf(out[n].mode, sizeof out[n].mode, "%s", b ? b : "default");
        n++;
    }
    return n;
}

static inline const char *standin_driver(void) {
    const char *d = getenv("GDRDOCTOR_STANDIN_DRIVER");
    return d ? d : "580.159.04";
}

static inline void standin_log(const char *lib, const char *fn) {
    const char *path = getenv("GDRDOCTOR_STANDIN_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    const char *m = getenv("CUDA_MPS_PIPE_DIRECTORY");
    fprintf(f, "%s %s CUDA_MPS_PIPE_DIRECTORY=%s CUDA_VISIBLE_DEVICES=%s\n", lib, fn, m ? m : "(unset)",
            v ? v : "(unset)");
    fclose(f);
}
