// watch_demo: a worked example of kernels/include/gdrdoctor/progress.cuh and `gdrdoctor watch`.
//
// Two protocols between a producer kernel and a consumer kernel, each one thread spinning on
// flags, the way GPU-initiated communication waits:
//   ring      the producer streams items through a ring of slots; it waits for credit (tail),
//             the consumer waits for the head;
//   pingpong  two kernels bounce a counter.
// With --gpus 2 the producer runs on GPU 0 and the consumer on GPU 1, and every flag is written
// over peer access (NVLink or PCIe P2P) into the other GPU's memory; with --gpus 1 both run on
// one GPU, on two streams.
//
// --hang CLASS plants one stall of each class `gdrdoctor watch` knows:
//   spin-stall        a waiter on a go flag the host never sets
//   forward-progress  a grid barrier with 8 more blocks of 1024 threads than can be resident
//   ordering          the producer's stream waits for an event recorded after the consumer
//   stale-read        the waiter compares a register it loaded once; the flag (in the area's
//                     words, so watch can read it) is set by the host after 50 ms
//   silent            a loop of its own announced with GDRDOCTOR_MARK_WAITING, no heartbeats
//   remote-wait       the peer GPU's kernel (GPU 0; itself with --gpus 1) writes the word next
//                     to the awaited one
// Each planted kernel honours the cooperative abort (`gdrdoctor watch --abort`): the program
// then prints `done aborted=1` and exits 0. Without an abort it gives up after --hang-seconds
// and leaves with _exit(3) (a context with a hung kernel must not be destroyed:
// knowledge/hang-probe.md §0 item 6).
//
// --bench R runs each protocol R times bare and R times instrumented, in pairs whose order
// alternates (bare first in even rounds, instrumented first in odd ones, so that neither variant
// always runs second), after one warm-up run of each, and prints one JSON line per run with its
// round (scripts/watch-gpu-test.sh computes the overhead per pair and its spread). The time is
// the wall time from the first launch to the end of both kernels; the launch handles are made
// before it.
//
// Build: make -C examples/watch (nvcc), or
//   nvcc -O3 -std=c++14 -lineinfo -arch=native -I kernels/include -o watch_demo watch_demo.cu

#include <gdrdoctor/progress.cuh>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long u64;

#define CK(x)                                                                                          \
    do {                                                                                               \
        cudaError_t e_ = (x);                                                                          \
        if (e_ != cudaSuccess) {                                                                       \
            fprintf(stderr, "watch_demo: %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                                   \
        }                                                                                              \
    } while (0)

enum Site {
    SITE_CREDIT = 1,   // ring: the producer waits for credit (tail)
    SITE_HEAD = 2,     // ring: the consumer waits for the head
    SITE_PING = 3,     // pingpong: pong waits for ping
    SITE_PONG = 4,     // pingpong: ping waits for pong
    SITE_GO = 5,       // spin-stall: the host's go flag
    SITE_BARRIER = 6,  // forward-progress: the last block's flag
    SITE_FLAG = 7,     // ordering: set by set_flag on another stream
    SITE_STALE = 8,    // stale-read: a register loaded once
    SITE_SILENT = 9,   // silent: a loop of its own
    SITE_REMOTE = 10,  // remote-wait: written by the peer gpu
};

__device__ __forceinline__ u64 ld_acquire_sys(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_sys(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 gtimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---------------------------------------------------------------------------------------------
// The protocols: I = true uses the instrumented waits, false the bare spins they replace.
// ---------------------------------------------------------------------------------------------

template <bool I>
__global__ void ring_producer(u64* slots, u64* head, const u64* tail, unsigned nslots, u64 n, gdrdoctor_launch_t h) {
    if (threadIdx.x != 0) return;
    GDRDOCTOR_ENTER(h);
    for (u64 i = 0; i < n; i++) {
        if (i >= nslots) {
            u64 need = i - nslots + 1;
            if (I) {
                if (GDRDOCTOR_WAIT(tail, GDRDOCTOR_GE, need, SITE_CREDIT)) break;
            } else {
                while (ld_acquire_sys(tail) < need) {
                }
            }
        }
        slots[i % nslots] = i * 2654435761ull;
        st_release_sys(head, i + 1);
    }
    GDRDOCTOR_LEAVE();
}

template <bool I>
__global__ void ring_consumer(const u64* slots, const u64* head, u64* tail, unsigned nslots, u64 n, u64* result,
                              gdrdoctor_launch_t h) {
    if (threadIdx.x != 0) return;
    GDRDOCTOR_ENTER(h);
    u64 sum = 0;
    for (u64 i = 0; i < n; i++) {
        if (I) {
            if (GDRDOCTOR_WAIT(head, GDRDOCTOR_GE, i + 1, SITE_HEAD)) break;
        } else {
            while (ld_acquire_sys(head) < i + 1) {
            }
        }
        sum += slots[i % nslots];
        st_release_sys(tail, i + 1);
    }
    *result = sum;
    GDRDOCTOR_LEAVE();
}

template <bool I>
__global__ void pp_ping(u64* remote_b, const u64* local_a, u64 n, gdrdoctor_launch_t h) {
    if (threadIdx.x != 0) return;
    GDRDOCTOR_ENTER(h);
    for (u64 i = 1; i <= n; i++) {
        st_release_sys(remote_b, i);
        if (I) {
            if (GDRDOCTOR_WAIT(local_a, GDRDOCTOR_EQ, i, SITE_PONG)) break;
        } else {
            while (ld_acquire_sys(local_a) != i) {
            }
        }
    }
    GDRDOCTOR_LEAVE();
}

template <bool I>
__global__ void pp_pong(u64* remote_a, const u64* local_b, u64 n, gdrdoctor_launch_t h) {
    if (threadIdx.x != 0) return;
    GDRDOCTOR_ENTER(h);
    for (u64 i = 1; i <= n; i++) {
        if (I) {
            if (GDRDOCTOR_WAIT(local_b, GDRDOCTOR_EQ, i, SITE_PING)) break;
        } else {
            while (ld_acquire_sys(local_b) != i) {
            }
        }
        st_release_sys(remote_a, i);
    }
    GDRDOCTOR_LEAVE();
}

// ---------------------------------------------------------------------------------------------
// The planted stalls.
// ---------------------------------------------------------------------------------------------

// One waiter: mode 0 GDRDOCTOR_WAIT; 1 a register loaded once (stale read); 2 a loop of its own
// announced with GDRDOCTOR_MARK_WAITING (no heartbeat), checking the abort every 4096 polls.
__global__ void wait_flag(const u64* flag, u64 want, unsigned site, int mode, gdrdoctor_launch_t h) {
    if (threadIdx.x != 0) return;
    GDRDOCTOR_ENTER(h);
    if (mode == 0) {
        GDRDOCTOR_WAIT(flag, GDRDOCTOR_EQ, want, site);
    } else if (mode == 1) {
        u64 cached = ld_acquire_sys(flag);
        GDRDOCTOR_WAIT_LOAD(flag, GDRDOCTOR_EQ, want, site, [&]() { return cached; });
    } else {
        u64 seen = ld_acquire_sys(flag);
        GDRDOCTOR_MARK_WAITING(flag, GDRDOCTOR_EQ, want, seen, site);
        unsigned k = 0;
        while (*(const volatile u64*)flag != want) {
            if ((++k & 4095u) == 0 && GDRDOCTOR_ABORTED()) break;
        }
        GDRDOCTOR_MARK_DONE();
    }
    GDRDOCTOR_LEAVE();
}

// Store `value` at `flag` after `delay_ns` (release, system scope).
__global__ void set_flag(u64* flag, u64 value, u64 delay_ns, gdrdoctor_launch_t h) {
    if (threadIdx.x != 0) return;
    GDRDOCTOR_ENTER(h);
    u64 t0 = gtimer();
    while (gtimer() - t0 < delay_ns) {
    }
    st_release_sys(flag, value);
    GDRDOCTOR_LEAVE();
}

// Every block waits for the flag the last block sets: fine while the grid is resident.
__global__ void barrier(u64* flag, gdrdoctor_launch_t h) {
    GDRDOCTOR_ENTER(h);
    if (threadIdx.x == 0) {
        if (blockIdx.x == gridDim.x - 1) {
            st_release_sys(flag, 1);
        } else {
            GDRDOCTOR_WAIT(flag, GDRDOCTOR_EQ, 1ull, SITE_BARRIER);
        }
    }
    __syncthreads();
    GDRDOCTOR_LEAVE();
}

// ---------------------------------------------------------------------------------------------
// Host
// ---------------------------------------------------------------------------------------------

static gdrdoctor_progress_t gd;

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Opts {
    int gpus = 1;
    const char* proto = "ring";
    const char* hang = nullptr;
    int bench = 0;
    double seconds = 2.0;
    double hang_seconds = 30.0;
    u64 ring_items = 1ull << 18;
    u64 pp_rounds = 50000;
    unsigned nslots = 64;
};

static void usage() {
    fprintf(stderr,
            "usage: watch_demo [--gpus 1|2] [--proto ring|pingpong] [--seconds S]\n"
            "                  [--hang spin-stall|forward-progress|ordering|stale-read|silent|remote-wait]\n"
            "                  [--hang-seconds S] [--bench R] [--ring-items N] [--pp-rounds N]\n");
    exit(2);
}

// Load every kernel on every device before the first launch: a kernel loaded lazily behind a
// spinning one never runs (knowledge/hang-probe.md §0 item 4).
static void preload(int dev) {
    CK(cudaSetDevice(dev));
    cudaFuncAttributes a;
    CK(cudaFuncGetAttributes(&a, ring_producer<true>));
    CK(cudaFuncGetAttributes(&a, ring_producer<false>));
    CK(cudaFuncGetAttributes(&a, ring_consumer<true>));
    CK(cudaFuncGetAttributes(&a, ring_consumer<false>));
    CK(cudaFuncGetAttributes(&a, pp_ping<true>));
    CK(cudaFuncGetAttributes(&a, pp_ping<false>));
    CK(cudaFuncGetAttributes(&a, pp_pong<true>));
    CK(cudaFuncGetAttributes(&a, pp_pong<false>));
    CK(cudaFuncGetAttributes(&a, wait_flag));
    CK(cudaFuncGetAttributes(&a, set_flag));
    CK(cudaFuncGetAttributes(&a, barrier));
}

struct Setup {
    int prod_dev = 0, cons_dev = 0;
    cudaStream_t prod_stream, cons_stream;
    // Ring: slots and head in the consumer's memory, tail in the producer's.
    u64 *slots, *head, *tail, *result;
    // Ping-pong: a in the producer's (ping's) memory, b in the consumer's (pong's).
    u64 *flag_a, *flag_b;
    // Plants: words in the consumer's memory.
    u64* cons_words;
};

static void setup(const Opts& o, Setup& s) {
    s.prod_dev = 0;
    s.cons_dev = o.gpus >= 2 ? 1 : 0;
    if (o.gpus >= 2) {
        int can01 = 0, can10 = 0;
        CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
        CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
        if (!can01 || !can10) {
            fprintf(stderr, "watch_demo: gpus 0 and 1 cannot access each other's memory (peer access)\n");
            exit(2);
        }
        CK(cudaSetDevice(0));
        cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
        CK(cudaSetDevice(1));
        e = cudaDeviceEnablePeerAccess(0, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
        (void)cudaGetLastError();
    }
    CK(cudaSetDevice(s.cons_dev));
    CK(cudaStreamCreateWithFlags(&s.cons_stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&s.slots, 8ull * o.nslots));
    CK(cudaMalloc(&s.head, 64));
    CK(cudaMalloc(&s.result, 64));
    CK(cudaMalloc(&s.flag_b, 64));
    CK(cudaMalloc(&s.cons_words, 4096));
    CK(cudaSetDevice(s.prod_dev));
    CK(cudaStreamCreateWithFlags(&s.prod_stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&s.tail, 64));
    CK(cudaMalloc(&s.flag_a, 64));
}

static void reset(Setup& s) {
    CK(cudaSetDevice(s.cons_dev));
    CK(cudaMemset(s.head, 0, 64));
    CK(cudaMemset(s.flag_b, 0, 64));
    CK(cudaMemset(s.cons_words, 0, 4096));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(s.prod_dev));
    CK(cudaMemset(s.tail, 0, 64));
    CK(cudaMemset(s.flag_a, 0, 64));
    CK(cudaDeviceSynchronize());
}

// One run of a protocol; seconds of wall time from the launches to the end of both kernels.
static double run_protocol(const Opts& o, Setup& s, bool ring, bool instrumented) {
    reset(s);
    gdrdoctor_launch_t off;
    memset(&off, 0, sizeof(off));
    // The launch handles (host work: find the kernel slot, count the launch) before the clock.
    gdrdoctor_launch_t hc = off, hp = off;
    if (instrumented) {
        hc = gdrdoctor_launch(&gd, ring ? "ring_consumer" : "pp_pong", 1, 32);
        hp = gdrdoctor_launch(&gd, ring ? "ring_producer" : "pp_ping", 1, 32);
    }
    double t0 = now_s();
    CK(cudaSetDevice(s.cons_dev));
    if (ring) {
        if (instrumented)
            ring_consumer<true><<<1, 32, 0, s.cons_stream>>>(s.slots, s.head, s.tail, o.nslots, o.ring_items, s.result, hc);
        else
            ring_consumer<false><<<1, 32, 0, s.cons_stream>>>(s.slots, s.head, s.tail, o.nslots, o.ring_items, s.result, hc);
    } else {
        if (instrumented)
            pp_pong<true><<<1, 32, 0, s.cons_stream>>>(s.flag_a, s.flag_b, o.pp_rounds, hc);
        else
            pp_pong<false><<<1, 32, 0, s.cons_stream>>>(s.flag_a, s.flag_b, o.pp_rounds, hc);
    }
    CK(cudaGetLastError());
    CK(cudaSetDevice(s.prod_dev));
    if (ring) {
        if (instrumented)
            ring_producer<true><<<1, 32, 0, s.prod_stream>>>(s.slots, s.head, s.tail, o.nslots, o.ring_items, hp);
        else
            ring_producer<false><<<1, 32, 0, s.prod_stream>>>(s.slots, s.head, s.tail, o.nslots, o.ring_items, hp);
    } else {
        if (instrumented)
            pp_ping<true><<<1, 32, 0, s.prod_stream>>>(s.flag_b, s.flag_a, o.pp_rounds, hp);
        else
            pp_ping<false><<<1, 32, 0, s.prod_stream>>>(s.flag_b, s.flag_a, o.pp_rounds, hp);
    }
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s.prod_stream));
    CK(cudaStreamSynchronize(s.cons_stream));
    return now_s() - t0;
}

// Wait for the planted kernels: they end only when aborted (or, for stale-read, never). Gives up
// after --hang-seconds with _exit(3): destroying a context with a hung kernel can block.
static int wait_plant(const Opts& o, Setup& s, bool stale) {
    double t0 = now_s();
    bool set = false;
    while (true) {
        if (stale && !set && now_s() - t0 > 0.05) {
            gdrdoctor_progress_words_host(&gd)[0] = 1;  // memory holds it; the waiter never looks
            set = true;
        }
        bool done = true;
        for (int k = 0; k < 2; k++) {
            cudaStream_t st = k == 0 ? s.prod_stream : s.cons_stream;
            CK(cudaSetDevice(k == 0 ? s.prod_dev : s.cons_dev));
            cudaError_t e = cudaStreamQuery(st);
            if (e == cudaErrorNotReady) {
                done = false;
            } else if (e != cudaSuccess) {
                CK(e);
            }
        }
        if (done) {
            int aborted = gdrdoctor_progress_aborted(&gd);
            printf("done aborted=%d\n", aborted);
            fflush(stdout);
            gdrdoctor_progress_cleanup(&gd);
            return 0;
        }
        if (now_s() - t0 > o.hang_seconds) {
            printf("timeout: the planted stall was not aborted within %.0f s\n", o.hang_seconds);
            fflush(stdout);
            if (strncmp(gd.path, "/dev/shm", 8) == 0) shm_unlink(gd.path + 8);
            _exit(3);
        }
        usleep(10000);
    }
}

static int plant(const Opts& o, Setup& s) {
    reset(s);
    const char* c = o.hang;
    int peer = s.prod_dev;
    if (strcmp(c, "spin-stall") == 0) {
        gdrdoctor_progress_site(&gd, SITE_GO, "go flag the host never sets", GDRDOCTOR_WRITER_HOST, -1, -1);
        CK(cudaSetDevice(s.cons_dev));
        wait_flag<<<1, 32, 0, s.cons_stream>>>(s.cons_words, 1, SITE_GO, 0, gdrdoctor_launch(&gd, "wait_flag", 1, 32));
    } else if (strcmp(c, "forward-progress") == 0) {
        CK(cudaSetDevice(s.cons_dev));
        int per_sm = 0, sms = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, barrier, 1024, 0));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, s.cons_dev));
        unsigned grid = (unsigned)(per_sm * sms) + 8u;
        printf("barrier grid %u blocks of 1024 threads, capacity %d\n", grid, per_sm * sms);
        gdrdoctor_progress_site(&gd, SITE_BARRIER, "flag set by the last block", GDRDOCTOR_WRITER_SAME_GPU, -1, -1);
        barrier<<<grid, 1024, 0, s.cons_stream>>>(s.cons_words, gdrdoctor_launch(&gd, "barrier", grid, 1024));
    } else if (strcmp(c, "ordering") == 0) {
        CK(cudaSetDevice(s.cons_dev));
        int writer = gdrdoctor_progress_kernel_named(&gd, "set_flag", 1, 32);
        gdrdoctor_progress_site(&gd, SITE_FLAG, "flag set by set_flag", GDRDOCTOR_WRITER_SAME_GPU, -1, writer);
        cudaStream_t other;
        cudaEvent_t ev;
        CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        wait_flag<<<1, 32, 0, s.cons_stream>>>(s.cons_words, 1, SITE_FLAG, 0, gdrdoctor_launch(&gd, "wait_flag", 1, 32));
        CK(cudaEventRecord(ev, s.cons_stream));
        CK(cudaStreamWaitEvent(other, ev, 0));
        set_flag<<<1, 32, 0, other>>>(s.cons_words, 1, 0, gdrdoctor_progress_launch(&gd, writer));
        s.prod_stream = other;  // wait_plant watches both
        s.prod_dev = s.cons_dev;
    } else if (strcmp(c, "stale-read") == 0) {
        gdrdoctor_progress_site(&gd, SITE_STALE, "flag in the area, set by the host", GDRDOCTOR_WRITER_HOST, -1, -1);
        CK(cudaSetDevice(s.cons_dev));
        u64* w = (u64*)(size_t)gdrdoctor_progress_words_device(&gd);
        wait_flag<<<1, 32, 0, s.cons_stream>>>(w, 1, SITE_STALE, 1, gdrdoctor_launch(&gd, "wait_flag", 1, 32));
    } else if (strcmp(c, "silent") == 0) {
        gdrdoctor_progress_site(&gd, SITE_SILENT, "flag of a loop without heartbeats", GDRDOCTOR_WRITER_UNKNOWN, -1, -1);
        CK(cudaSetDevice(s.cons_dev));
        wait_flag<<<1, 32, 0, s.cons_stream>>>(s.cons_words, 1, SITE_SILENT, 2, gdrdoctor_launch(&gd, "wait_flag", 1, 32));
    } else if (strcmp(c, "remote-wait") == 0) {
        gdrdoctor_progress_site(&gd, SITE_REMOTE, "flag the peer gpu writes", GDRDOCTOR_WRITER_PEER_GPU, peer, -1);
        CK(cudaSetDevice(s.cons_dev));
        wait_flag<<<1, 32, 0, s.cons_stream>>>(s.cons_words, 1, SITE_REMOTE, 0, gdrdoctor_launch(&gd, "wait_flag", 1, 32));
        CK(cudaSetDevice(s.prod_dev));
        // The peer writes the neighbouring word: a wrong offset.
        set_flag<<<1, 32, 0, s.prod_stream>>>(s.cons_words + 1, 1, 20000000ull, gdrdoctor_launch(&gd, "set_flag", 1, 32));
    } else {
        usage();
    }
    CK(cudaGetLastError());
    printf("planted %s (pid %d, area %s)\n", c, (int)getpid(), gd.path);
    fflush(stdout);
    return wait_plant(o, s, strcmp(c, "stale-read") == 0);
}

int main(int argc, char** argv) {
    Opts o;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (!strcmp(a, "--gpus") && v) o.gpus = atoi(v), i++;
        else if (!strcmp(a, "--proto") && v) o.proto = v, i++;
        else if (!strcmp(a, "--hang") && v) o.hang = v, i++;
        else if (!strcmp(a, "--bench") && v) o.bench = atoi(v), i++;
        else if (!strcmp(a, "--seconds") && v) o.seconds = atof(v), i++;
        else if (!strcmp(a, "--hang-seconds") && v) o.hang_seconds = atof(v), i++;
        else if (!strcmp(a, "--ring-items") && v) o.ring_items = strtoull(v, nullptr, 10), i++;
        else if (!strcmp(a, "--pp-rounds") && v) o.pp_rounds = strtoull(v, nullptr, 10), i++;
        else usage();
    }
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    if (o.gpus > ndev) {
        fprintf(stderr, "watch_demo: --gpus %d but %d gpu(s) visible\n", o.gpus, ndev);
        return 2;
    }
    for (int d = 0; d < o.gpus; d++) preload(d);
    CK(cudaSetDevice(0));
    char job[64];
    snprintf(job, sizeof(job), "watch_demo %s %dgpu", o.hang ? o.hang : o.proto, o.gpus);
    if (gdrdoctor_progress_init(&gd, job, nullptr) != 0) fprintf(stderr, "watch_demo: progress area off: %s\n", gd.error);
    gdrdoctor_progress_site(&gd, SITE_CREDIT, "ring: producer waits for credit",
                            o.gpus >= 2 ? GDRDOCTOR_WRITER_PEER_GPU : GDRDOCTOR_WRITER_SAME_GPU, o.gpus >= 2 ? 1 : -1, -1);
    gdrdoctor_progress_site(&gd, SITE_HEAD, "ring: consumer waits for head",
                            o.gpus >= 2 ? GDRDOCTOR_WRITER_PEER_GPU : GDRDOCTOR_WRITER_SAME_GPU, o.gpus >= 2 ? 0 : -1, -1);
    gdrdoctor_progress_site(&gd, SITE_PING, "pingpong: pong waits for ping",
                            o.gpus >= 2 ? GDRDOCTOR_WRITER_PEER_GPU : GDRDOCTOR_WRITER_SAME_GPU, o.gpus >= 2 ? 0 : -1, -1);
    gdrdoctor_progress_site(&gd, SITE_PONG, "pingpong: ping waits for pong",
                            o.gpus >= 2 ? GDRDOCTOR_WRITER_PEER_GPU : GDRDOCTOR_WRITER_SAME_GPU, o.gpus >= 2 ? 1 : -1, -1);
    printf("pid %d area %s gpus %d\n", (int)getpid(), gd.path, o.gpus);
    fflush(stdout);
    Setup s;
    setup(o, s);
    if (o.hang) return plant(o, s);
    if (o.bench > 0) {
        for (int proto = 0; proto < 2; proto++) {
            bool ring = proto == 0;
            run_protocol(o, s, ring, false);  // warm-up
            run_protocol(o, s, ring, true);
            for (int r = 0; r < o.bench; r++) {
                for (int k = 0; k < 2; k++) {
                    int instr = (r & 1) ? 1 - k : k;
                    double t = run_protocol(o, s, ring, instr != 0);
                    u64 n = ring ? o.ring_items : o.pp_rounds;
                    printf("{\"proto\": \"%s\", \"gpus\": %d, \"round\": %d, \"mode\": \"%s\", \"n\": %llu, "
                           "\"seconds\": %.6f, \"%s\": %.3f}\n",
                           ring ? "ring" : "pingpong", o.gpus, r, instr ? "instrumented" : "bare", n, t,
                           ring ? "items_per_s" : "rtt_ns", ring ? n / t : t * 1e9 / n);
                    fflush(stdout);
                }
            }
        }
        gdrdoctor_progress_cleanup(&gd);
        return 0;
    }
    bool ring = strcmp(o.proto, "pingpong") != 0;
    double t0 = now_s();
    int runs = 0;
    while (now_s() - t0 < o.seconds && !gdrdoctor_progress_aborted(&gd)) {
        run_protocol(o, s, ring, true);
        runs++;
    }
    printf("done runs=%d aborted=%d\n", runs, gdrdoctor_progress_aborted(&gd));
    gdrdoctor_progress_cleanup(&gd);
    return 0;
}
