/* A job that uses kernels/include/gdrdoctor/progress.cuh without a GPU: the header's own host
 * code (GDRDOCTOR_PROGRESS_NO_CUDA) creates the area, names the sites, declares the kernels and
 * hands out launches; this program then writes the records the way the device side does
 * (seqlock publish, heartbeats, the abort check), for each stall class and for a healthy job.
 * tests/watch.rs builds it with gcc and runs `gdrdoctor watch` against it.
 *
 * Usage: watch_emu SCENARIO RUN_MS
 * Prints "READY <area path>" once the records are in place, runs RUN_MS (0: until killed),
 * then cleans the area up and exits 0.
 *
 * EMU_LATE_MAGIC_MS=N: play a job inside gdrdoctor_progress_init, which writes the magic last:
 * the area exists with a zero magic ("INIT <area path>" is printed) for N ms before the magic
 * appears and READY is printed.
 */
#define _GNU_SOURCE
#define GDRDOCTOR_PROGRESS_NO_CUDA
#include "gdrdoctor/progress.cuh"

#include <stddef.h>
#include <time.h>

static gdrdoctor_progress_t P;

static unsigned long long now_ns(void) { return gdrdoctor_realtime_ns_(); }

static gdrdoctor_record* rec_of(gdrdoctor_launch_t l, unsigned block, unsigned warp) {
    return (gdrdoctor_record*)(size_t)l.records + (size_t)block * l.warps_per_block + warp;
}

/* As enter(): STARTED with the launch's generation. */
static void enter(gdrdoctor_launch_t l, unsigned block, unsigned warp) {
    gdrdoctor_record* r = rec_of(l, block, warp);
    unsigned s = (l.kernel_gen & 0xffffu) << 16;
    __atomic_store_n(&r->seq, s | 1u, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&r->phase_site, GDRDOCTOR_PH_STARTED << 24, __ATOMIC_RELAXED);
    __atomic_store_n(&r->block, block, __ATOMIC_RELAXED);
    __atomic_store_n(&r->sm_warp, (7u << 16) | warp, __ATOMIC_RELAXED);
    __atomic_store_n(&r->kernel_gen, l.kernel_gen, __ATOMIC_RELAXED);
    __atomic_store_n(&r->iter, 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&r->seq, s + 2u, __ATOMIC_RELEASE);
    if (block == 0 && warp == 0) {
        gdrdoctor_kernel* k = (gdrdoctor_kernel*)(size_t)l.kernel;
        __atomic_store_n(&k->grid_blocks, l.max_blocks, __ATOMIC_RELAXED);
    }
}

/* As publish(): the seqlock update of the wait fields. */
static void publish(gdrdoctor_record* r, unsigned phase, unsigned cmp, unsigned site, unsigned long long addr,
                    unsigned long long expected, unsigned long long observed, unsigned long long start,
                    unsigned long long beat) {
    unsigned seq = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&r->seq, seq + 1u, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&r->phase_site, (phase << 24) | ((cmp & 0xffu) << 16) | (site & 0xffffu), __ATOMIC_RELAXED);
    __atomic_store_n(&r->addr, addr, __ATOMIC_RELAXED);
    __atomic_store_n(&r->expected, expected, __ATOMIC_RELAXED);
    __atomic_store_n(&r->observed, observed, __ATOMIC_RELAXED);
    __atomic_store_n(&r->wait_start_gt, start, __ATOMIC_RELAXED);
    __atomic_store_n(&r->beat_gt, beat, __ATOMIC_RELAXED);
    __atomic_store_n(&r->seq, seq + 2u, __ATOMIC_RELEASE);
}

static void beat(gdrdoctor_record* r, unsigned long long observed) {
    __atomic_store_n(&r->observed, observed, __ATOMIC_RELAXED);
    __atomic_store_n(&r->beat_gt, now_ns(), __ATOMIC_RELAXED);
}

#define WIDE GDRDOCTOR_CMP_WIDE
#define AGO(ms) (now_ns() - (unsigned long long)(ms) * 1000000ull)

int main(int argc, char** argv) {
    const char* scenario = argc > 1 ? argv[1] : "healthy";
    long run_ms = argc > 2 ? atol(argv[2]) : 0;
    gdrdoctor_progress_options_t opt;
    memset(&opt, 0, sizeof(opt));
    opt.records = 256;
    opt.sites = 16;
    opt.kernels = 8;
    opt.words = 16;
    if (gdrdoctor_progress_init(&P, "emu", &opt) != 0) {
        fprintf(stderr, "init: %s\n", P.error);
        return 2;
    }
    gdrdoctor_area_header* h = (gdrdoctor_area_header*)P.host;
    const char* late = getenv("EMU_LATE_MAGIC_MS");
    unsigned long long magic = h->magic;
    if (late) {
        __atomic_store_n(&h->magic, 0ull, __ATOMIC_RELEASE);
        printf("INIT %s\n", P.path);
        fflush(stdout);
    }
    /* %globaltimer here is CLOCK_REALTIME: calibrated, offset 0. */
    h->gt_offset_ns = 0;
    h->gt_calib_err_ns = 0;
    __atomic_or_fetch(&h->flags, GDRDOCTOR_AREA_CALIBRATED, __ATOMIC_RELEASE);
    unsigned long long* words = gdrdoctor_progress_words_host(&P);
    unsigned long long wdev = gdrdoctor_progress_words_device(&P);

    /* Every scenario: a consumer kernel of 2 blocks x 2 warps, the waiter is block 1 warp 0. */
    int beating = 1, abortable = 0, healthy = 0;
    /* EMU_ABORTABLE=1: every scenario honours the abort and then exits, as watch_demo does. */
    int exit_on_abort = getenv("EMU_ABORTABLE") != NULL;
    gdrdoctor_record* waiter = NULL;
    gdrdoctor_record* beaters[4];
    int nb = 0;
    unsigned long long seen = 0;
    unsigned site = 4, cmp = WIDE | GDRDOCTOR_GE;
    unsigned long long addr = 0xdead0, want = 1001;
    int cons = gdrdoctor_progress_kernel(&P, "consumer", 2, 64);
    gdrdoctor_launch_t lc = gdrdoctor_progress_launch(&P, cons);
    gdrdoctor_progress_site(&P, 4, "consumer waits head", GDRDOCTOR_WRITER_SAME_GPU, -1, -1);
    enter(lc, 0, 0);
    enter(lc, 0, 1);
    enter(lc, 1, 0);
    enter(lc, 1, 1);
    if (strcmp(scenario, "healthy") == 0) {
        healthy = 1;
    } else if (strcmp(scenario, "spin-stall") == 0 || strcmp(scenario, "abortable") == 0 ||
               strcmp(scenario, "ignore-abort") == 0) {
        seen = 1000;
        abortable = strcmp(scenario, "abortable") == 0;
    } else if (strcmp(scenario, "forward-progress") == 0) {
        /* A 4-block barrier: blocks 0-2 wait for the flag block 3 sets; block 3 never runs. */
        int bar = gdrdoctor_progress_kernel(&P, "barrier", 4, 32);
        gdrdoctor_launch_t lb = gdrdoctor_progress_launch(&P, bar);
        gdrdoctor_progress_site(&P, 5, "flag set by the last block", GDRDOCTOR_WRITER_SAME_GPU, -1, bar);
        unsigned b;
        for (b = 0; b < 3; b++) {
            enter(lb, b, 0);
            publish(rec_of(lb, b, 0), GDRDOCTOR_PH_WAITING, WIDE, 5, 0xbeef0, 1, 0, AGO(2000), now_ns());
            beaters[nb++] = rec_of(lb, b, 0);
        }
        waiter = rec_of(lb, 0, 0);
        site = 5;
        cmp = WIDE;
        addr = 0xbeef0;
        want = 1;
    } else if (strcmp(scenario, "ordering") == 0) {
        int prod = gdrdoctor_progress_kernel(&P, "producer", 1, 32);
        (void)gdrdoctor_progress_launch(&P, prod); /* handed out, never starts */
        gdrdoctor_progress_site(&P, 1, "flag from producer", GDRDOCTOR_WRITER_SAME_GPU, -1, prod);
        site = 1;
        cmp = WIDE;
        addr = 0xf1a90;
        want = 1;
    } else if (strcmp(scenario, "stale-read") == 0) {
        words[0] = 1; /* memory holds the value the waiter never sees */
        gdrdoctor_progress_site(&P, 2, "flag in the area's words", GDRDOCTOR_WRITER_HOST, -1, -1);
        site = 2;
        cmp = WIDE;
        addr = wdev;
        want = 1;
    } else if (strcmp(scenario, "silent") == 0) {
        beating = 0;
        site = 3;
        cmp = WIDE;
        addr = 0x5110;
        want = 1;
    } else if (strcmp(scenario, "remote-wait") == 0) {
        gdrdoctor_progress_site(&P, 7, "flag gpu 1 writes", GDRDOCTOR_WRITER_PEER_GPU, 1, -1);
        site = 7;
        cmp = WIDE;
        addr = 0x7e7e0;
        want = 1;
    } else {
        fprintf(stderr, "unknown scenario %s\n", scenario);
        gdrdoctor_progress_cleanup(&P);
        return 2;
    }
    if (exit_on_abort) abortable = 1;
    unsigned long long t0 = AGO(2000);
    if (!healthy && !waiter) {
        waiter = rec_of(lc, 1, 0);
        publish(waiter, GDRDOCTOR_PH_WAITING, cmp, site, addr, want, seen, t0, beating ? now_ns() : t0);
        beaters[nb++] = waiter;
    }
    /* With EMU_LATE_MAGIC_MS the magic (and READY) come from the loop below, which keeps the
     * heartbeats going meanwhile, as a job's kernels would. */
    unsigned long long magic_at = now_ns() + (late ? (unsigned long long)atol(late) * 1000000ull : 0);
    if (!late) {
        printf("READY %s\n", P.path);
        fflush(stdout);
    }
    unsigned long long start = now_ns();
    unsigned iter = 0;
    int aborted = 0;
    while (run_ms == 0 || now_ns() - start < (unsigned long long)run_ms * 1000000ull) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        if (late && now_ns() >= magic_at) {
            __atomic_store_n(&h->magic, magic, __ATOMIC_RELEASE);
            printf("READY %s\n", P.path);
            fflush(stdout);
            late = NULL;
        }
        if (healthy) {
            /* Short waits that complete: PROGRESS with a moving iter and fresh times. */
            unsigned long long t = now_ns();
            iter++;
            publish(rec_of(lc, 1, 0), GDRDOCTOR_PH_PROGRESS, WIDE | GDRDOCTOR_GE, 4, addr, iter, iter, t - 1000, t);
            __atomic_store_n(&rec_of(lc, 1, 0)->iter, iter, __ATOMIC_RELAXED);
            continue;
        }
        if (aborted) continue;
        if (beating) {
            int i;
            for (i = 0; i < nb; i++) beat(beaters[i], seen);
        }
        if (abortable && gdrdoctor_progress_aborted(&P)) {
            int i;
            for (i = 0; i < nb; i++)
                publish(beaters[i], GDRDOCTOR_PH_ABORTED, cmp, site, addr, want, seen, t0, now_ns());
            aborted = 1;
            if (exit_on_abort) break;
        }
    }
    if (aborted) printf("done aborted=1\n");
    gdrdoctor_progress_cleanup(&P);
    return 0;
}
