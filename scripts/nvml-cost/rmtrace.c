/* rmtrace: an LD_PRELOAD shim that times what a process asks the NVIDIA kernel driver (issue 37:
 * where NVML's init and first handle spend their time). Every ioctl is timed; for the resource
 * manager's control escape (NV_ESC_RM_CONTROL, nr 0x2a) the command and its status are printed
 * (NVOS54_PARAMETERS: client, object, cmd at byte 8, status at byte 28), for NV_ESC_RM_ALLOC
 * (0x2b) the class (NVOS21_PARAMETERS, byte 12); nanosleep, clock_nanosleep and usleep are timed
 * too. Times in ms from the first call.
 *
 *   gcc -O2 -shared -fPIC -o rmtrace.so rmtrace.c -ldl
 *   RMTRACE=out.txt LD_PRELOAD=./rmtrace.so nvidia-smi topo -m
 *
 * Written for scripts/nvml-cost.sh; no part of gdrdoctor loads it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static FILE* out;
static double t0;
static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static void init(void) {
    if (!out) {
        const char* p = getenv("RMTRACE");
        out = p ? fopen(p, "w") : NULL;
        if (!out) out = stderr;
        t0 = now_ms();
    }
}

int ioctl(int fd, unsigned long req, ...) {
    va_list ap;
    va_start(ap, req);
    void* arg = va_arg(ap, void*);
    va_end(ap);
    static int (*real)(int, unsigned long, ...);
    if (!real) real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    init();
    double a = now_ms();
    int r = real(fd, req, arg);
    double b = now_ms();
    unsigned nr = req & 0xff, ty = (req >> 8) & 0xff;
    const uint32_t* p = (const uint32_t*)arg;
    if (ty == 0x46 && nr == 0x2a && p)
        fprintf(out, "%9.3f %7.3f ctl fd=%d h=%08x/%08x cmd=%08x st=%08x\n", a - t0, b - a, fd, p[0], p[1], p[2], p[7]);
    else if (ty == 0x46 && nr == 0x2b && p)
        fprintf(out, "%9.3f %7.3f alloc fd=%d class=%08x\n", a - t0, b - a, fd, p[3]);
    else
        fprintf(out, "%9.3f %7.3f ioctl fd=%d ty=%02x nr=%02x\n", a - t0, b - a, fd, ty, nr);
    return r;
}

int nanosleep(const struct timespec* q, struct timespec* rem) {
    static int (*real)(const struct timespec*, struct timespec*);
    if (!real) real = (int (*)(const struct timespec*, struct timespec*))dlsym(RTLD_NEXT, "nanosleep");
    init();
    double a = now_ms();
    int r = real(q, rem);
    fprintf(out, "%9.3f %7.3f nanosleep %ld ns\n", a - t0, now_ms() - a, q ? q->tv_nsec : 0L);
    return r;
}

int clock_nanosleep(clockid_t c, int fl, const struct timespec* q, struct timespec* rem) {
    static int (*real)(clockid_t, int, const struct timespec*, struct timespec*);
    if (!real)
        real = (int (*)(clockid_t, int, const struct timespec*, struct timespec*))dlsym(RTLD_NEXT, "clock_nanosleep");
    init();
    double a = now_ms();
    int r = real(c, fl, q, rem);
    fprintf(out, "%9.3f %7.3f clock_nanosleep %ld ns\n", a - t0, now_ms() - a, q ? q->tv_nsec : 0L);
    return r;
}

int usleep(useconds_t u) {
    static int (*real)(useconds_t);
    if (!real) real = (int (*)(useconds_t))dlsym(RTLD_NEXT, "usleep");
    init();
    double a = now_ms();
    int r = real(u);
    fprintf(out, "%9.3f %7.3f usleep %u us\n", a - t0, now_ms() - a, u);
    return r;
}
