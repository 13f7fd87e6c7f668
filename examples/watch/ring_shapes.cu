// ring_shapes: what a satisfied GDRDOCTOR_WAIT costs, on ring shapes the header was not tuned on.
//
// watch_demo's ring (one thread per side, 8-byte words, system scope, 64 slots, about 2.2 us per
// item) is the shape progress.cuh's fast path was tuned on. This program runs a producer/consumer
// ring in several other shapes, each bare (the spin the wait replaces) and instrumented
// (GDRDOCTOR_WAIT), in alternating pairs on one GPU, and prints one JSON line per shape:
//
//   word     4 or 8 bytes (head and tail are u32 or u64)
//   scope    sys (ld.acquire.sys, GDRDOCTOR_WAIT) or gpu (ld.acquire.gpu,
//            GDRDOCTOR_WAIT_ACQUIRE_GPU): the gpu scope makes the tightest loop
//   slots    the ring's size: the producer's credit wait is satisfied at its first poll while
//            the ring is not full, which is the case the fast path is for
//   work     dependent multiply-adds the producer does per item before the store (0: the
//            tightest loop)
//   warps    consumer warps per block, every lane of each waiting on the head (several waiting
//            warps per block); with more than one, a __syncthreads before the tail moves
//
// Each item costs two waits (the producer's credit, the consumer's head: with `warps` > 1, one
// per consumer warp). The figure of merit is the difference in ns per item between the
// instrumented and the bare ring, and its share of the bare item time (the overhead). Medians of
// R pairs; in each pair the order alternates.
//
// Build and run (the GPU machine):
//   nvcc -O3 -std=c++14 -arch=native -I kernels/include -o ring_shapes examples/watch/ring_shapes.cu
//   ./ring_shapes [--rounds R] [--items N] [--shape WORD:SCOPE:SLOTS:WORK:WARPS ...]
// scripts/ring-shapes.sh runs the default shapes and summarises.
//
// -DRS_PAD=N (0-7) puts N volatile shared-memory stores at the top of every kernel, bare and
// instrumented alike, run once per launch: it moves the loops that follow by N instructions
// (16 bytes each), so that a difference that is only where the loop happens to land in the
// instruction cache shows as a change with N (scripts/ring-shapes.sh PADS="0 1 2 3").

#include <gdrdoctor/progress.cuh>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

typedef unsigned long long u64;
typedef unsigned int u32;

#define CK(x)                                                                                                \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "ring_shapes: %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

enum { SITE_CREDIT = 1, SITE_HEAD = 2 };

#ifndef RS_PAD
#define RS_PAD 0
#endif
// RS_PAD stores, once per launch, before the loop (see the top of the file): one instruction each.
#define RS_ST(o) asm volatile("st.volatile.shared.u32 [%0+" #o "], %1;" ::"r"(base), "r"(val) : "memory")
__device__ __forceinline__ void rs_pad() {
#if RS_PAD > 0
    __shared__ u32 pad_sink[8];
    const u32 base = (u32)__cvta_generic_to_shared(pad_sink);
    const u32 val = threadIdx.x;
    RS_ST(0);
#if RS_PAD > 1
    RS_ST(4);
#endif
#if RS_PAD > 2
    RS_ST(8);
#endif
#if RS_PAD > 3
    RS_ST(12);
#endif
#if RS_PAD > 4
    RS_ST(16);
#endif
#if RS_PAD > 5
    RS_ST(20);
#endif
#if RS_PAD > 6
    RS_ST(24);
#endif
#if RS_PAD > 7
#error "RS_PAD is 0 to 7"
#endif
#endif
}

template <typename W, int GPU>
__device__ __forceinline__ W ld_acq(const W* p);
template <>
__device__ __forceinline__ u64 ld_acq<u64, 0>(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u64 ld_acq<u64, 1>(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u32 ld_acq<u32, 0>(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u32 ld_acq<u32, 1>(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

template <typename W, int GPU>
__device__ __forceinline__ void st_rel(W* p, W v);
template <>
__device__ __forceinline__ void st_rel<u64, 0>(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
template <>
__device__ __forceinline__ void st_rel<u64, 1>(u64* p, u64 v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
template <>
__device__ __forceinline__ void st_rel<u32, 0>(u32* p, u32 v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
template <>
__device__ __forceinline__ void st_rel<u32, 1>(u32* p, u32 v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The instrumented wait of the scope: the macro a user of that scope would write.
#define RS_WAIT(GPU, addr, want, site)                                                       \
    ((GPU) ? GDRDOCTOR_WAIT_ACQUIRE_GPU(addr, GDRDOCTOR_GE, want, site) \
           : GDRDOCTOR_WAIT(addr, GDRDOCTOR_GE, want, site))

template <typename W, int GPU, bool I>
__global__ void producer(u64* slots, W* head, const W* tail, u32 nslots, u64 n, u32 work, gdrdoctor_launch_t h) {
    if (threadIdx.x != 0) return;
    rs_pad();
    GDRDOCTOR_ENTER(h);
    for (u64 i = 0; i < n; i++) {
        if (i >= nslots) {
            W need = (W)(i - nslots + 1);
            if (I) {
                if (RS_WAIT(GPU, tail, need, SITE_CREDIT)) break;
            } else {
                while (ld_acq<W, GPU>(tail) < need) {
                }
            }
        }
        u64 v = i * 2654435761ull;
        for (u32 k = 0; k < work; k++) v = v * 6364136223846793005ull + 1442695040888963407ull;
        slots[i % nslots] = v;
        st_rel<W, GPU>(head, (W)(i + 1));
    }
    GDRDOCTOR_LEAVE();
}

template <typename W, int GPU, bool I>
__global__ void consumer(const u64* slots, const W* head, W* tail, u32 nslots, u64 n, u64* result,
                         gdrdoctor_launch_t h) {
    rs_pad();
    GDRDOCTOR_ENTER(h);
    u64 sum = 0;
    const bool sync = blockDim.x > 32;
    for (u64 i = 0; i < n; i++) {
        W want = (W)(i + 1);
        if (I) {
            if (RS_WAIT(GPU, head, want, SITE_HEAD)) break;
        } else {
            while (ld_acq<W, GPU>(head) < want) {
            }
        }
        sum += slots[i % nslots];
        if (sync) __syncthreads();
        if (threadIdx.x == 0) st_rel<W, GPU>(tail, want);
    }
    if (threadIdx.x == 0) *result = sum;
    GDRDOCTOR_LEAVE();
}

struct Shape {
    int word;  // 4 or 8
    int gpu;   // 0 sys, 1 gpu scope
    u32 slots;
    u32 work;
    u32 warps;
};

static double now_s() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static gdrdoctor_progress_t gd;
static u64 *g_slots, *g_result;
static void *g_head, *g_tail;
static cudaStream_t g_ps, g_cs;

template <typename W, int GPU>
static double run_typed(const Shape& s, u64 n, bool instr) {
    CK(cudaMemset(g_head, 0, 64));
    CK(cudaMemset(g_tail, 0, 64));
    CK(cudaDeviceSynchronize());
    gdrdoctor_launch_t off;
    memset(&off, 0, sizeof(off));
    gdrdoctor_launch_t hc = off, hp = off;
    if (instr) {
        hc = gdrdoctor_launch(&gd, "consumer", 1, 32 * s.warps);
        hp = gdrdoctor_launch(&gd, "producer", 1, 32);
    }
    W* head = (W*)g_head;
    W* tail = (W*)g_tail;
    double t0 = now_s();
    if (instr) {
        consumer<W, GPU, true><<<1, 32 * s.warps, 0, g_cs>>>(g_slots, head, tail, s.slots, n, g_result, hc);
        producer<W, GPU, true><<<1, 32, 0, g_ps>>>(g_slots, head, tail, s.slots, n, s.work, hp);
    } else {
        consumer<W, GPU, false><<<1, 32 * s.warps, 0, g_cs>>>(g_slots, head, tail, s.slots, n, g_result, hc);
        producer<W, GPU, false><<<1, 32, 0, g_ps>>>(g_slots, head, tail, s.slots, n, s.work, hp);
    }
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_ps));
    CK(cudaStreamSynchronize(g_cs));
    return now_s() - t0;
}

// Load every kernel before the first launch: a kernel loaded lazily behind a spinning one never
// runs (knowledge/hang-probe.md section 0 item 4; this program's first GPU run hung on it).
template <typename W, int GPU>
static void preload_typed() {
    cudaFuncAttributes a;
    CK(cudaFuncGetAttributes(&a, producer<W, GPU, true>));
    CK(cudaFuncGetAttributes(&a, producer<W, GPU, false>));
    CK(cudaFuncGetAttributes(&a, consumer<W, GPU, true>));
    CK(cudaFuncGetAttributes(&a, consumer<W, GPU, false>));
}

static void preload() {
    preload_typed<u64, 0>();
    preload_typed<u64, 1>();
    preload_typed<u32, 0>();
    preload_typed<u32, 1>();
}

static double run(const Shape& s, u64 n, bool instr) {
    if (s.word == 4) return s.gpu ? run_typed<u32, 1>(s, n, instr) : run_typed<u32, 0>(s, n, instr);
    return s.gpu ? run_typed<u64, 1>(s, n, instr) : run_typed<u64, 0>(s, n, instr);
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

static bool parse_shape(const char* t, Shape& s) {
    char scope[8] = {0};
    if (sscanf(t, "%d:%7[^:]:%u:%u:%u", &s.word, scope, &s.slots, &s.work, &s.warps) != 5) return false;
    if (s.word != 4 && s.word != 8) return false;
    if (!strcmp(scope, "sys"))
        s.gpu = 0;
    else if (!strcmp(scope, "gpu"))
        s.gpu = 1;
    else
        return false;
    return s.slots >= 1 && s.slots <= 4096 && s.warps >= 1 && s.warps <= 32;
}

int main(int argc, char** argv) {
    int rounds = 15;
    u64 items = 1ull << 18;
    std::vector<Shape> shapes;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
        Shape s;
        if (!strcmp(a, "--rounds") && v)
            rounds = atoi(v), i++;
        else if (!strcmp(a, "--items") && v)
            items = strtoull(v, nullptr, 10), i++;
        else if (!strcmp(a, "--shape") && v && parse_shape(v, s))
            shapes.push_back(s), i++;
        else {
            fprintf(stderr,
                    "usage: ring_shapes [--rounds R] [--items N] [--shape WORD:SCOPE:SLOTS:WORK:WARPS]...\n"
                    "  WORD 4|8, SCOPE sys|gpu, SLOTS 1-4096, WORK >= 0, WARPS 1-32\n");
            return 2;
        }
    }
    if (shapes.empty()) {
        // watch_demo's shape first (the reference), then the ones the header was not tuned on.
        const char* def[] = {"8:sys:64:0:1",  "8:gpu:64:0:1",  "4:gpu:64:0:1",  "4:sys:64:0:1",
                             "8:gpu:16:0:1",  "8:gpu:256:0:1", "8:gpu:64:0:4",  "4:gpu:64:0:8",
                             "8:gpu:64:32:1", "8:sys:64:32:1", "8:gpu:1024:0:1"};
        for (const char* d : def) {
            Shape s;
            parse_shape(d, s);
            shapes.push_back(s);
        }
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    preload();
    if (gdrdoctor_progress_init(&gd, "ring_shapes", nullptr) != 0) {
        fprintf(stderr, "ring_shapes: progress area off: %s (the instrumented runs would spin bare)\n", gd.error);
        return 1;
    }
    gdrdoctor_progress_site(&gd, SITE_CREDIT, "ring: producer waits for credit", GDRDOCTOR_WRITER_SAME_GPU, -1, -1);
    gdrdoctor_progress_site(&gd, SITE_HEAD, "ring: consumer waits for head", GDRDOCTOR_WRITER_SAME_GPU, -1, -1);
    CK(cudaStreamCreateWithFlags(&g_ps, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g_cs, cudaStreamNonBlocking));
    CK(cudaMalloc(&g_slots, 8 * 4096));
    CK(cudaMalloc(&g_result, 64));
    CK(cudaMalloc(&g_head, 64));
    CK(cudaMalloc(&g_tail, 64));
    printf("{\"pid\":%d,\"rounds\":%d,\"items\":%llu}\n", (int)getpid(), rounds, items);
    fflush(stdout);
    for (const Shape& s : shapes) {
        run(s, items / 4, false);  // warm-up of both variants
        run(s, items / 4, true);
        std::vector<double> bare, ins, diff;
        for (int r = 0; r < rounds; r++) {
            double tb, ti;
            if (r & 1) {
                ti = run(s, items, true);
                tb = run(s, items, false);
            } else {
                tb = run(s, items, false);
                ti = run(s, items, true);
            }
            bare.push_back(tb * 1e9 / items);
            ins.push_back(ti * 1e9 / items);
            diff.push_back((ti - tb) / tb * 100.0);
        }
        double mb = median(bare), mi = median(ins), md = median(diff);
        std::vector<double> d = diff;
        std::sort(d.begin(), d.end());
        // Waits per item: the producer's credit wait, and each consumer warp's head wait.
        printf("{\"word\":%d,\"scope\":\"%s\",\"slots\":%u,\"work\":%u,\"warps\":%u,\"ns_per_item_bare\":%.2f,"
               "\"ns_per_item_instrumented\":%.2f,\"overhead_pct\":%.3f,\"overhead_pct_min\":%.3f,"
               "\"overhead_pct_max\":%.3f,\"ns_per_item_added\":%.2f,\"waits_per_item\":%u}\n",
               s.word, s.gpu ? "gpu" : "sys", s.slots, s.work, s.warps, mb, mi, md, d.front(), d.back(), mi - mb,
               1 + s.warps);
        fflush(stdout);
    }
    gdrdoctor_progress_cleanup(&gd);
    return 0;
}
