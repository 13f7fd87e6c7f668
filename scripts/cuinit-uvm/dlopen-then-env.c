/* What loading libcuda does before cuInit, for the `live-cuda` worker started ahead of its
 * request (issue 37): it loads libcuda while NVML answers the parent, then sets
 * CUDA_VISIBLE_DEVICES (the GPUs it may open) and calls cuInit.
 *
 *   gcc -O2 -o dte dlopen-then-env.c -ldl && ./dte [VISIBLE]
 *
 * Prints: the time the load took; every /dev/nvidia* file the process has open after the load
 * (must be none: loading opens no GPU); then, with CUDA_VISIBLE_DEVICES set to VISIBLE (default
 * "": no GPU) after the load, cuInit's result and cuDeviceGetCount (with "": 100,
 * CUDA_ERROR_NO_DEVICE, and 0: the variable set after the load is obeyed). Exit 0 when both
 * hold, 1 when not. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int nvidia_files(void) {
    int n = 0;
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    struct dirent* e;
    while ((e = readdir(d))) {
        char p[300], t[256];
        snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(p, t, sizeof t - 1);
        if (k <= 0) continue;
        t[k] = 0;
        if (strncmp(t, "/dev/nvidia", 11) == 0) {
            printf("open after the load: %s\n", t);
            n++;
        }
    }
    closedir(d);
    return n;
}

int main(int argc, char** argv) {
    const char* visible = argc > 1 ? argv[1] : "";
    double t0 = ms();
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    double t1 = ms();
    if (!h) {
        printf("dlopen libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    printf("load_ms %.2f\n", t1 - t0);
    int files = nvidia_files();
    printf("nvidia_files_after_load %d\n", files);
    setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*count)(int*) = (int (*)(int*))dlsym(h, "cuDeviceGetCount");
    if (!init || !count) return 2;
    double t2 = ms();
    int r = init(0);
    double t3 = ms();
    int n = -1;
    int rc = count(&n);
    printf("visible \"%s\" cuInit %d (%.1f ms) cuDeviceGetCount %d n=%d\n", visible, r, t3 - t2, rc, n);
    int ok = files == 0 && (visible[0] != 0 || (r == 100 || n == 0));
    printf("%s\n", ok ? "OK: loading opens no GPU; the variable set after the load is obeyed"
                      : "NOT OK");
    return ok ? 0 : 1;
}
