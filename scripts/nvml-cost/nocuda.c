/* nocuda: an LD_PRELOAD shim for scripts/nvml-cost.sh (issue 37): which library NVML's init
 * loads, and who sleeps during the first handle. Every dlopen is logged with its caller's
 * library; with NOCUDA=1 a dlopen of libcuda is refused (NULL, as on a node without it), to
 * measure what NVML costs and answers without CUDA's start. nanosleep/usleep/clock_nanosleep are
 * logged with the caller's library too; with NOSLEEP=1 a sleep of 1-10 ms is cut to 0 (to see
 * whether the first handle's 5 ms sleep is needed for any answer gdrdoctor asks for).
 *
 *   gcc -O2 -shared -fPIC -o nocuda.so nocuda.c -ldl
 *   NOCUDA=1 SHIMLOG=out.txt LD_PRELOAD=./nocuda.so ./nvml-cost
 *
 * With PROF=1 it also samples where the main thread is (SIGPROF every 100 us of wall time, a
 * CLOCK_MONOTONIC timer aimed at the main thread; the interrupted instruction named by library
 * and nearest exported symbol: a thread blocked in the kernel shows its libc stub), printed at
 * exit, most samples first.
 *
 * Written for measurement; no part of gdrdoctor loads it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/time.h>
#include <ucontext.h>
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
        const char* p = getenv("SHIMLOG");
        out = p ? fopen(p, "w") : NULL;
        if (!out) out = stderr;
        setvbuf(out, NULL, _IOLBF, 0);
        t0 = now_ms();
    }
}
static const char* who(void* ra) {
    Dl_info i;
    if (ra && dladdr(ra, &i) && i.dli_fname) {
        const char* s = strrchr(i.dli_fname, '/');
        return s ? s + 1 : i.dli_fname;
    }
    return "?";
}
static int env_on(const char* n) {
    const char* v = getenv(n);
    return v && *v == '1';
}

void* dlopen(const char* f, int fl) {
    static void* (*real)(const char*, int);
    if (!real) real = (void* (*)(const char*, int))dlsym(RTLD_NEXT, "dlopen");
    init();
    void* ra = __builtin_return_address(0);
    double a = now_ms();
    if (f && strstr(f, "libcuda") && env_on("NOCUDA")) {
        fprintf(out, "%9.3f dlopen %s from %s: REFUSED\n", a - t0, f, who(ra));
        return NULL;
    }
    void* r = real(f, fl);
    fprintf(out, "%9.3f %7.3f dlopen %s from %s -> %s\n", a - t0, now_ms() - a, f ? f : "(self)", who(ra),
            r ? "ok" : "NULL");
    return r;
}

static int cut(long ns) { return env_on("NOSLEEP") && ns >= 1000000L && ns <= 10000000L; }

int nanosleep(const struct timespec* q, struct timespec* rem) {
    static int (*real)(const struct timespec*, struct timespec*);
    if (!real) real = (int (*)(const struct timespec*, struct timespec*))dlsym(RTLD_NEXT, "nanosleep");
    init();
    void* ra = __builtin_return_address(0);
    long ns = q ? q->tv_sec * 1000000000L + q->tv_nsec : 0;
    double a = now_ms();
    int r = cut(ns) ? 0 : real(q, rem);
    fprintf(out, "%9.3f %7.3f nanosleep %ld ns from %s%s\n", a - t0, now_ms() - a, ns, who(ra), cut(ns) ? " CUT" : "");
    return r;
}

int clock_nanosleep(clockid_t c, int fl, const struct timespec* q, struct timespec* rem) {
    static int (*real)(clockid_t, int, const struct timespec*, struct timespec*);
    if (!real)
        real = (int (*)(clockid_t, int, const struct timespec*, struct timespec*))dlsym(RTLD_NEXT, "clock_nanosleep");
    init();
    void* ra = __builtin_return_address(0);
    long ns = q ? q->tv_sec * 1000000000L + q->tv_nsec : 0;
    double a = now_ms();
    int r = (cut(ns) && !(fl & TIMER_ABSTIME)) ? 0 : real(c, fl, q, rem);
    fprintf(out, "%9.3f %7.3f clock_nanosleep %ld ns flags %d from %s\n", a - t0, now_ms() - a, ns, fl, who(ra));
    return r;
}

int usleep(useconds_t u) {
    static int (*real)(useconds_t);
    if (!real) real = (int (*)(useconds_t))dlsym(RTLD_NEXT, "usleep");
    init();
    void* ra = __builtin_return_address(0);
    double a = now_ms();
    int r = cut((long)u * 1000L) ? 0 : real(u);
    fprintf(out, "%9.3f %7.3f usleep %u us from %s%s\n", a - t0, now_ms() - a, u, who(ra), cut((long)u * 1000L) ? " CUT" : "");
    return r;
}

#define NSAMP 65536
static void* samp[NSAMP];
static volatile int nsamp;
static timer_t prof_timer;
static void on_prof(int sig, siginfo_t* si, void* uc) {
    (void)sig;
    (void)si;
    if (nsamp < NSAMP) samp[nsamp++] = (void*)((ucontext_t*)uc)->uc_mcontext.gregs[REG_RIP];
}
__attribute__((constructor)) static void prof_start(void) {
    if (!env_on("PROF")) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev._sigev_un._tid = gettid();
    if (timer_create(CLOCK_MONOTONIC, &ev, &prof_timer)) return;
    struct itimerspec it = {{0, 100000}, {0, 100000}};
    timer_settime(prof_timer, 0, &it, NULL);
}
struct agg { char name[160]; int n; };
static int by_n(const void* a, const void* b) { return ((const struct agg*)b)->n - ((const struct agg*)a)->n; }
__attribute__((destructor)) static void prof_end(void) {
    if (!env_on("PROF") || !nsamp) return;
    timer_delete(prof_timer);
    static struct agg ag[4096];
    int na = 0;
    for (int i = 0; i < nsamp; i++) {
        char nm[160];
        Dl_info d;
        if (dladdr(samp[i], &d) && d.dli_fname) {
            const char* f = strrchr(d.dli_fname, '/');
            snprintf(nm, sizeof nm, "%s %s", f ? f + 1 : d.dli_fname, d.dli_sname ? d.dli_sname : "?");
        } else
            snprintf(nm, sizeof nm, "? %p", samp[i]);
        int j = 0;
        while (j < na && strcmp(ag[j].name, nm)) j++;
        if (j == na && na < 4096) { snprintf(ag[na].name, sizeof ag[na].name, "%s", nm); ag[na++].n = 0; }
        if (j < na) ag[j].n++;
    }
    qsort(ag, na, sizeof ag[0], by_n);
    init();
    fprintf(out, "## %d samples of the main thread, one per 100 us\n", nsamp);
    for (int j = 0; j < na && j < 40; j++) fprintf(out, "%6d %s\n", ag[j].n, ag[j].name);
}
