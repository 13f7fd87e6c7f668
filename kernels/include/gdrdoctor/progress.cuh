/* gdrdoctor/progress.cuh: instrumented spin-waits for your own CUDA kernels, watched live by
 * `gdrdoctor watch` from another process (no CUDA, no ptrace, no cooperation from the job).
 *
 * One header, no dependency beyond the CUDA runtime and libc; C++14 for the device side, C for
 * the layout and the POSIX host side. It compiles under nvcc, under NVRTC (the host side is left
 * out when __CUDACC_RTC__ is defined), and as host-only C or C++ (`GDRDOCTOR_PROGRESS_NO_CUDA`:
 * the shared-memory area without the CUDA registration, used by gdrdoctor's tests).
 *
 * Three lines in an existing program:
 *
 *   gdrdoctor_progress_t gd; gdrdoctor_progress_init(&gd, "my-job", NULL);        // host, once
 *   k<<<grid, block>>>(..., gdrdoctor_launch(&gd, "k", grid, block));             // host, per launch
 *   GDRDOCTOR_ENTER(h); ... GDRDOCTOR_WAIT(flag, GDRDOCTOR_GE, want, 1);           // device
 *
 * (the kernel takes a `gdrdoctor_launch_t h` parameter). Then `gdrdoctor watch --pid <pid>`
 * reports every waiter stalled for longer than its threshold: kernel, block, warp, SM, site,
 * address, expected and observed value, for how long, and a class of cause (spin-stall,
 * forward-progress, ordering, stale-read, silent, remote-wait), the classes of
 * `gdrdoctor probe --hang`. docs/guides/watch.md is the guide.
 *
 * The design is the one `probe --hang` measured on an H200 (kernels/hang.cu, docs/guides/hangs.md):
 *  - the record area is POSIX shared memory `/dev/shm/gdrdoctor-<pid>-<n>`, registered with
 *    cudaHostRegister(Mapped | Portable), so kernels on every GPU write it and another process
 *    reads it while they run (tried on two H200s: knowledge/hang-probe.md, last section);
 *  - one 64-byte record per warp (block-linear index x warps per block + warp), written only by
 *    the lowest active lane of that warp, published with a seqlock (seq odd while an update is
 *    in flight, a system fence after the odd store, st.release.sys of the even value);
 *  - waits publish lazily: the first 1024 polls are a bare spin; a wait still unsatisfied after
 *    them continues in an out-of-line slow path that publishes WAITING (address, expected,
 *    observed, start time), refreshes `observed` and `beat_gt` every hb_ns, checks the abort
 *    flag every 1024 polls and publishes PROGRESS when satisfied. A wait satisfied within its
 *    first 1024 polls stores and counts nothing (`iter` counts the long waits, published by the
 *    slow path and at exit; watch reads only WAITING records, so a count on the fast path would
 *    buy nothing and cost a ring 0.4 point). The fast path holds only launch-wide values, so
 *    that the compiler keeps it and the loop around it warp-uniform like the bare spin
 *    (docs/performance.md, watch section);
 *  - time is %globaltimer (ns); init calibrates it against CLOCK_REALTIME with one tiny kernel;
 *  - no __trap(), no device assert: a trap poisons the context.
 *
 * Layout version 1. `gdrdoctor watch` validates every field it reads (checks/src/watch.rs
 * mirrors this layout; tests/watch.rs compiles this header with gcc and compares offsets).
 */
#ifndef GDRDOCTOR_PROGRESS_CUH
#define GDRDOCTOR_PROGRESS_CUH

/* ----------------------------------------------------------------------------------------- */
/* 1. The shared layout (C and C++, host and device)                                         */
/* ----------------------------------------------------------------------------------------- */

#define GDRDOCTOR_PROGRESS_MAGIC 0x3147525044524447ULL /* bytes "GDRDPRG1" */
#define GDRDOCTOR_PROGRESS_VERSION 1u

/* Record phases (the values of probe --hang's HangRecord). */
#define GDRDOCTOR_PH_NOT_STARTED 0u
#define GDRDOCTOR_PH_STARTED 1u
#define GDRDOCTOR_PH_WAITING 2u
#define GDRDOCTOR_PH_PROGRESS 3u
#define GDRDOCTOR_PH_DONE 4u
#define GDRDOCTOR_PH_ABORTED 5u

/* Comparisons: the wait ends when (*addr CMP value). 0 and 1 are probe --hang's. */
#define GDRDOCTOR_EQ 0
#define GDRDOCTOR_GE 1
#define GDRDOCTOR_NE 2
#define GDRDOCTOR_GT 3
#define GDRDOCTOR_LE 4
#define GDRDOCTOR_LT 5
/* Bits of the record's cmp byte above the comparison. */
#define GDRDOCTOR_CMP_WIDE 0x10u   /* the awaited word is 8 bytes (else 4) */
#define GDRDOCTOR_CMP_SIGNED 0x20u /* the awaited word is signed */

/* Who writes the awaited word of a site (gdrdoctor_progress_site). */
#define GDRDOCTOR_WRITER_UNKNOWN 0u
#define GDRDOCTOR_WRITER_SAME_GPU 1u /* a kernel on the waiter's GPU */
#define GDRDOCTOR_WRITER_PEER_GPU 2u /* another GPU, over NVLink or PCIe peer access */
#define GDRDOCTOR_WRITER_HOST 3u     /* a CPU thread */
#define GDRDOCTOR_WRITER_NIC 4u      /* an RDMA write or atomic from a NIC */

/* Header flags. */
#define GDRDOCTOR_AREA_CALIBRATED 1u /* gt_offset_ns was measured */
#define GDRDOCTOR_AREA_CLOSED 2u     /* gdrdoctor_progress_cleanup ran */
#define GDRDOCTOR_AREA_NO_CUDA 4u    /* built without CUDA: dev_base is the host address */

/* Options flags. */
#define GDRDOCTOR_INIT_NO_CALIBRATE 1u

typedef struct gdrdoctor_area_header {
    unsigned long long magic;           /*   0 GDRDOCTOR_PROGRESS_MAGIC */
    unsigned int version;               /*   8 GDRDOCTOR_PROGRESS_VERSION */
    unsigned int header_size;           /*  12 sizeof(gdrdoctor_area_header) = 256 */
    unsigned int pid;                   /*  16 the job's pid */
    unsigned int flags;                 /*  20 GDRDOCTOR_AREA_* */
    unsigned long long start_ticks;     /*  24 /proc/self/stat starttime (pid reuse check) */
    unsigned long long created_ns;      /*  32 CLOCK_REALTIME at init */
    long long gt_offset_ns;             /*  40 CLOCK_REALTIME - %globaltimer */
    unsigned long long gt_calib_err_ns; /*  48 half the best calibration round trip */
    unsigned long long area_size;       /*  56 bytes of the whole area */
    unsigned long long dev_base;        /*  64 device address of the area */
    unsigned long long host_base;       /*  72 the job's host address of the area */
    unsigned int control_offset;        /*  80 */
    unsigned int site_offset;           /*  84 */
    unsigned int site_count;            /*  88 */
    unsigned int kernel_offset;         /*  92 */
    unsigned int kernel_count;          /*  96 at most 255 */
    unsigned int words_offset;          /* 100 user words watch can read (stale-read) */
    unsigned int words_count;           /* 104 8-byte words */
    unsigned int record_offset;         /* 108 */
    unsigned int record_count;          /* 112 */
    unsigned int records_used;          /* 116 records handed to kernels so far (host) */
    unsigned int kernels_used;          /* 120 kernel slots declared so far (host) */
    unsigned int dropped;               /* 124 kernel declarations refused: area full */
    unsigned int record_size;           /* 128 64 */
    unsigned int site_size;             /* 132 64 */
    unsigned int kernel_size;           /* 136 64 */
    int device;                         /* 140 CUDA ordinal current at init (-1: none) */
    char job[64];                       /* 144 job name, NUL-terminated */
    unsigned char reserved[48];         /* 208 */
} gdrdoctor_area_header;                /* 256 */

/* The control block: the only word another process ever writes is `abort` (gdrdoctor watch
 * --abort); the job may set it too (gdrdoctor_progress_abort). */
typedef struct gdrdoctor_control {
    unsigned int abort;            /*  0 non-zero: every instrumented wait returns 1 */
    unsigned int reserved0;        /*  4 */
    unsigned long long hb_ns;      /*  8 heartbeat period of slow waits */
    unsigned long long calib_gt;   /* 16 written by the calibration kernel */
    unsigned long long reserved[5];
} gdrdoctor_control; /* 64 */

typedef struct gdrdoctor_site {
    char name[40];              /*  0 host: what the site waits for */
    unsigned int line;          /* 40 device: __LINE__ of the wait, written by its first slow wait */
    unsigned int writer_kind;   /* 44 host: GDRDOCTOR_WRITER_* */
    int writer_device;          /* 48 host: the writer's CUDA ordinal (peer GPU), -1 unknown */
    int writer_kernel;          /* 52 host: kernel slot that writes the word, -1 none */
    unsigned int flags;         /* 56 bit 0: named by the host */
    unsigned int reserved;      /* 60 */
} gdrdoctor_site; /* 64 */

typedef struct gdrdoctor_kernel {
    char name[32];                /*  0 host */
    unsigned int rec_base;        /* 32 host: first record */
    unsigned int max_blocks;      /* 36 host: blocks with a record */
    unsigned int warps_per_block; /* 40 host: records per block */
    unsigned int enqueued;        /* 44 host: launches handed out (generation of the newest) */
    unsigned int grid_blocks;     /* 48 device: grid size of the last instance that started */
    int device;                   /* 52 host: CUDA ordinal current at declaration */
    unsigned int flags;           /* 56 bit 0: declared */
    unsigned int reserved;        /* 60 */
} gdrdoctor_kernel; /* 64 */

typedef struct gdrdoctor_record {
    unsigned int seq;                 /*  0 seqlock: odd while an update is in flight */
    unsigned int phase_site;          /*  4 phase:8 | cmp:8 | site:16 */
    unsigned int block;               /*  8 linear block index */
    unsigned int sm_warp;             /* 12 smid:16 | warp in block:16 */
    unsigned int kernel_gen;          /* 16 kernel slot:8 | launch generation:24 */
    unsigned int iter;                /* 20 long waits completed (mod 2^32): those past the fast path */
    unsigned long long addr;          /* 24 device address of the awaited word */
    unsigned long long expected;      /* 32 */
    unsigned long long observed;      /* 40 the last value seen (heartbeat) */
    unsigned long long wait_start_gt; /* 48 %globaltimer when the wait was published */
    unsigned long long beat_gt;       /* 56 %globaltimer of the last heartbeat */
} gdrdoctor_record; /* 64 */

/* What a kernel receives, by value, for one launch. records == 0: instrumentation off (bare
 * spins). */
typedef struct gdrdoctor_launch {
    unsigned long long records; /* device address of the kernel's first record */
    unsigned long long control; /* device address of the control block */
    unsigned long long sites;   /* device address of the site table */
    unsigned long long kernel;  /* device address of the kernel slot */
    unsigned long long hb_ns;
    unsigned int max_blocks;
    unsigned int warps_per_block;
    unsigned int kernel_gen; /* slot:8 | generation:24 */
    unsigned int nsites;
} gdrdoctor_launch_t; /* 56 */

#define GDRDOCTOR_HEADER_SIZE 256u
#define GDRDOCTOR_CONTROL_OFFSET 256u
#define GDRDOCTOR_RECORD_SIZE 64u

#if defined(__cplusplus) && __cplusplus >= 201103L
static_assert(sizeof(gdrdoctor_area_header) == 256, "gdrdoctor_area_header is 256 bytes");
static_assert(sizeof(gdrdoctor_control) == 64, "gdrdoctor_control is 64 bytes");
static_assert(sizeof(gdrdoctor_site) == 64, "gdrdoctor_site is 64 bytes");
static_assert(sizeof(gdrdoctor_kernel) == 64, "gdrdoctor_kernel is 64 bytes");
static_assert(sizeof(gdrdoctor_record) == 64, "gdrdoctor_record is 64 bytes");
static_assert(sizeof(gdrdoctor_launch_t) == 56, "gdrdoctor_launch_t is 56 bytes");
#endif

/* ----------------------------------------------------------------------------------------- */
/* 2. Device side (nvcc and NVRTC)                                                           */
/* ----------------------------------------------------------------------------------------- */

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace gdrdoctor {

typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u64 gtimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ u32 smid() {
    u32 r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 laneid() {
    u32 r;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 ld_volatile_u32(const u32* p) {
    u32 v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_relaxed_u32(u32* p, u32 v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_u64(u64* p, u64 v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_release_u32(u32* p, u32 v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* The loads a wait can poll with. */
enum Load { ACQUIRE_SYS = 0, ACQUIRE_GPU = 1, VOLATILE = 2, RELAXED_SYS = 3 };

template <int L>
__device__ __forceinline__ u32 load32(const void* p);
template <>
__device__ __forceinline__ u32 load32<ACQUIRE_SYS>(const void* p) {
    u32 v;
    asm volatile("ld.acquire.sys.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u32 load32<ACQUIRE_GPU>(const void* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u32 load32<VOLATILE>(const void* p) {
    u32 v;
    asm volatile("ld.volatile.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u32 load32<RELAXED_SYS>(const void* p) {
    u32 v;
    asm volatile("ld.relaxed.sys.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
template <int L>
__device__ __forceinline__ u64 load64(const void* p);
template <>
__device__ __forceinline__ u64 load64<ACQUIRE_SYS>(const void* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u64 load64<ACQUIRE_GPU>(const void* p) {
    u64 v;
    asm volatile("ld.acquire.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u64 load64<VOLATILE>(const void* p) {
    u64 v;
    asm volatile("ld.volatile.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
template <>
__device__ __forceinline__ u64 load64<RELAXED_SYS>(const void* p) {
    u64 v;
    asm volatile("ld.relaxed.sys.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* Width and signedness of the awaited word (4 or 8 bytes). */
template <typename T>
struct word;
template <>
struct word<unsigned int> {
    enum { wide = 0, is_signed = 0 };
};
template <>
struct word<int> {
    enum { wide = 0, is_signed = 1 };
};
template <>
struct word<unsigned long long> {
    enum { wide = 1, is_signed = 0 };
};
template <>
struct word<long long> {
    enum { wide = 1, is_signed = 1 };
};
template <>
struct word<unsigned long> {
    enum { wide = sizeof(unsigned long) == 8, is_signed = 0 };
};
template <>
struct word<long> {
    enum { wide = sizeof(long) == 8, is_signed = 1 };
};

/* A loader: polls the awaited word with one flavour of load. */
template <typename T, int L>
struct Loader {
    const volatile T* p;
    __device__ __forceinline__ T operator()() const {
        if (word<T>::wide) return (T)load64<L>((const void*)p);
        return (T)load32<L>((const void*)p);
    }
};

template <typename T>
__device__ __forceinline__ bool satisfied(T v, int cmp, T want) {
    switch (cmp) {
        case GDRDOCTOR_GE: return v >= want;
        case GDRDOCTOR_NE: return v != want;
        case GDRDOCTOR_GT: return v > want;
        case GDRDOCTOR_LE: return v <= want;
        case GDRDOCTOR_LT: return v < want;
        default: return v == want;
    }
}

template <typename T>
__device__ __forceinline__ u64 widen(T v) {
    return word<T>::is_signed ? (u64)(long long)v : (u64)v;
}

/* A thread's view of its launch, in registers. Only launch-wide values: nothing here depends
 * on the thread, so ptxas can keep a wait's result, and the user's loop around the wait,
 * warp-uniform, as in the bare spin. The first version kept the warp's record pointer here
 * (it depends on threadIdx.y/z); the wait's result then depended on it through the slow path,
 * and nvcc 13 put convergence barriers (BSSY/BSYNC), YIELDs and the per-256 `iter` store on
 * the fast path of watch_demo's kernels, which measured +5.5% (ring) and +2.4% (ping-pong) on
 * an H200 (docs/performance.md). The slow path finds the record itself. */
struct Ctx {
    u64 records; /* device address of the kernel's first record; 0: off (bare spins) */
    const gdrdoctor_control* ctl;
    gdrdoctor_site* sites;
    u64 hb_ns;
    u32 nsites;
    u32 max_blocks;
    u32 warps_per_block;
    u32 iter;    /* waits of this thread that reached the slow path and ended */
    u32 aborted; /* a wait of this thread returned 1 */
};

__device__ __forceinline__ bool leader_lane() {
    return laneid() == (u32)(__ffs(__activemask()) - 1);
}

__device__ __forceinline__ u32 block_linear() {
    return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
__device__ __forceinline__ u32 warp_in_block() {
    return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) >> 5;
}

/* The record of this thread's warp, or NULL (area off, or a block or warp beyond the kernel's
 * declared shape). */
__device__ __forceinline__ gdrdoctor_record* record_of(u64 records, u32 max_blocks, u32 warps_per_block) {
    if (records == 0) return 0;
    u32 block = block_linear();
    u32 warp = warp_in_block();
    if (block >= max_blocks || warp >= warps_per_block) return 0;
    return (gdrdoctor_record*)records + (u64)block * warps_per_block + warp;
}
__device__ __forceinline__ gdrdoctor_record* record_of(const Ctx& c) {
    return record_of(c.records, c.max_blocks, c.warps_per_block);
}

/* Seqlock update of the wait fields. The fence after the odd store keeps the fields from
 * becoming visible before it (the reader rejects a record whose seq is odd or changed). */
__device__ __forceinline__ void publish(gdrdoctor_record* rec, u32 phase_site, u64 addr, u64 expected, u64 observed,
                                        u64 ws, u64 now, u32 iter) {
    u32 seq = ld_volatile_u32(&rec->seq);
    st_relaxed_u32(&rec->seq, seq + 1);
    __threadfence_system();
    st_relaxed_u32(&rec->phase_site, phase_site);
    st_relaxed_u32(&rec->iter, iter);
    st_relaxed_u64(&rec->addr, addr);
    st_relaxed_u64(&rec->expected, expected);
    st_relaxed_u64(&rec->observed, observed);
    st_relaxed_u64(&rec->wait_start_gt, ws);
    st_relaxed_u64(&rec->beat_gt, now);
    st_release_u32(&rec->seq, seq + 2);
}

/* Phase-only update (DONE, ABORTED at leave): the wait fields keep the last wait. */
__device__ __forceinline__ void publish_phase(gdrdoctor_record* rec, u32 phase, u32 iter) {
    u32 seq = ld_volatile_u32(&rec->seq);
    st_relaxed_u32(&rec->seq, seq + 1);
    __threadfence_system();
    st_relaxed_u32(&rec->phase_site, phase << 24);
    st_relaxed_u32(&rec->iter, iter);
    st_release_u32(&rec->seq, seq + 2);
}

/* Kernel entry: find this warp's record and publish STARTED (lowest active lane). */
__device__ __forceinline__ Ctx enter(const gdrdoctor_launch_t& h) {
    Ctx c;
    c.records = h.control ? h.records : 0;
    c.ctl = (const gdrdoctor_control*)h.control;
    c.sites = (gdrdoctor_site*)h.sites;
    c.hb_ns = h.hb_ns;
    c.nsites = h.nsites;
    c.max_blocks = h.max_blocks;
    c.warps_per_block = h.warps_per_block;
    c.iter = 0;
    c.aborted = 0;
    gdrdoctor_record* r = record_of(c);
    if (r && leader_lane()) {
        u32 s = (h.kernel_gen & 0xffffu) << 16;
        st_relaxed_u32(&r->seq, s | 1u);
        st_relaxed_u32(&r->phase_site, GDRDOCTOR_PH_STARTED << 24);
        st_relaxed_u32(&r->block, block_linear());
        st_relaxed_u32(&r->sm_warp, (smid() << 16) | (warp_in_block() & 0xffffu));
        st_relaxed_u32(&r->kernel_gen, h.kernel_gen);
        st_relaxed_u32(&r->iter, 0);
        st_release_u32(&r->seq, s + 2);
        if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && h.kernel)
            st_relaxed_u32(&((gdrdoctor_kernel*)h.kernel)->grid_blocks, gridDim.x * gridDim.y * gridDim.z);
    }
    return c;
}

/* Kernel exit: DONE (or ABORTED after an abort), so that a finished block is not taken for a
 * running or waiting one. */
__device__ __forceinline__ void leave(const Ctx& c) {
    gdrdoctor_record* r = record_of(c);
    if (r && leader_lane()) publish_phase(r, c.aborted ? GDRDOCTOR_PH_ABORTED : GDRDOCTOR_PH_DONE, c.iter);
}

#ifdef GDRDOCTOR_PROGRESS_PRINTF
__device__ __noinline__ void say(const char* what, u32 site, u32 line, u64 addr, u64 expected, u64 observed,
                                 u64 waited_ns) {
    printf("gdrdoctor-watch %s b=%u warp=%u site=%u line=%u addr=0x%llx expect=%llu observed=%llu waited_ms=%llu\n",
           what, block_linear(), warp_in_block(), site, line, addr, expected, observed, waited_ns / 1000000ull);
}
#endif

/* The slow path, out of line: entered only after 1024 unsatisfied polls, so the fast path keeps
 * the shape of a bare spin. Its arguments are launch-wide values (see Ctx). With the area off it
 * spins bare. Returns 0 when satisfied, 1 when aborted. */
template <typename T, typename F>
__device__ __noinline__ int wait_slow(u64 records, u32 max_blocks, u32 warps_per_block, const gdrdoctor_control* ctl,
                                      gdrdoctor_site* sites, u32 nsites, u64 hb_ns, const T* a, int cmp, T want,
                                      u32 site, u32 line, T v, u32 iter, F load) {
    if (records == 0) {
        while (!satisfied(v, cmp, want)) v = load();
        return 0;
    }
    /* Only the lowest active lane of a warp with a record publishes; every thread polls and
     * checks the abort flag. (The result must not depend on the lane or the warp: see Ctx.) */
    gdrdoctor_record* rec = record_of(records, max_blocks, warps_per_block);
    const bool leader = rec != 0 && leader_lane();
    const u32 cmpbits = ((u32)cmp & 15u) | (word<T>::wide ? GDRDOCTOR_CMP_WIDE : 0u) |
                        (word<T>::is_signed ? GDRDOCTOR_CMP_SIGNED : 0u);
    const u32 ps = (cmpbits << 16) | (site & 0xffffu);
    u64 now = gtimer();
    const u64 t0 = now;
    u64 last_beat = now;
    if (leader) {
        publish(rec, (GDRDOCTOR_PH_WAITING << 24) | ps, (u64)a, widen(want), widen(v), t0, now, iter);
        if (site < nsites && ld_volatile_u32(&sites[site].line) != line) st_relaxed_u32(&sites[site].line, line);
    }
    while (true) {
        for (u32 k = 0; k < 1024; k++) {
            v = load();
            if (satisfied(v, cmp, want)) {
                if (leader)
                    publish(rec, (GDRDOCTOR_PH_PROGRESS << 24) | ps, (u64)a, widen(want), widen(v), t0, gtimer(),
                            iter + 1);
                return 0;
            }
        }
        now = gtimer();
        if (leader && now - last_beat >= hb_ns) {
            last_beat = now;
            st_relaxed_u64(&rec->observed, widen(v));
            st_relaxed_u64(&rec->beat_gt, now);
        }
        if (ld_volatile_u32(&ctl->abort)) {
            if (leader) publish(rec, (GDRDOCTOR_PH_ABORTED << 24) | ps, (u64)a, widen(want), widen(v), t0, now, iter);
#ifdef GDRDOCTOR_PROGRESS_PRINTF
            if (leader) say("ABORTED", site, line, (u64)a, widen(want), widen(v), now - t0);
#endif
            return 1;
        }
    }
}

/* Wait until load() CMP want. The first 1024 polls are a bare spin; a longer wait continues in
 * wait_slow. Returns 0 when satisfied, 1 when the job was aborted (then every later wait of this
 * thread that has to wait returns 1 too, from wait_slow, which finds the abort flag set, as it is
 * never cleared). The fast path is the bare spin plus a poll counter on the unsatisfied branch:
 * no store, no call, and nothing after a satisfied poll but the return. One `for (;;)` whose
 * satisfied exit is the test right after each load (`#pragma unroll 1`, or the counted loop is
 * unrolled 4x). A satisfied wait does not count itself in `iter` (only waits that reach the slow
 * path do): in a ring whose producer's credit wait is almost always satisfied at the first
 * poll, that one register increment after the poll cost 0.4 point (scripts/watch-variants.sh,
 * runs 3 and 8 on one H200: ring +2.26% with it, +1.84% without; ping-pong +0.1% both). */
template <typename T, typename F>
__device__ __forceinline__ int wait_impl(Ctx& c, const T* a, int cmp, T want, u32 site, u32 line, F load) {
    u32 k = 0;
    T v;
#pragma unroll 1
    for (;;) {
        v = load();
        if (__builtin_expect(satisfied(v, cmp, want), 1)) return 0;
        if (__builtin_expect(++k == 1024, 0)) {
            if (wait_slow<T, F>(c.records, c.max_blocks, c.warps_per_block, c.ctl, c.sites, c.nsites, c.hb_ns, a, cmp,
                                want, site, line, v, c.iter, load)) {
                c.aborted = 1;
                return 1;
            }
            c.iter += 1;
            return 0;
        }
    }
}

/* GDRDOCTOR_WAIT_LOAD: the word's type comes from the address, the value converts to it. */
template <typename T, typename U, typename F>
__device__ __forceinline__ int wait(Ctx& c, const volatile T* a, int cmp, U want, u32 site, u32 line, F load) {
    return wait_impl<T, F>(c, (const T*)a, cmp, (T)want, site, line, load);
}

template <int L, typename T, typename U>
__device__ __forceinline__ int wait_load(Ctx& c, const volatile T* a, int cmp, U want, u32 site, u32 line) {
    Loader<T, L> ld;
    ld.p = a;
    return wait_impl<T, Loader<T, L> >(c, (const T*)a, cmp, (T)want, site, line, ld);
}

/* Aborted? One read of host memory: call it every few thousand iterations of your own loop, not on every one. */
__device__ __forceinline__ bool aborted(Ctx& c) {
    if (c.aborted) return true;
    if (c.ctl && ld_volatile_u32(&c.ctl->abort)) c.aborted = 1;
    return c.aborted != 0;
}

/* For your own loop that cannot use GDRDOCTOR_WAIT: WAITING once (no heartbeat: `silent`), MARK_DONE after. */
__device__ __forceinline__ void mark_waiting(Ctx& c, const void* a, int cmp, u64 want, u64 seen, u32 site, u32 line,
                                             int wide) {
    gdrdoctor_record* r = record_of(c);
    if (r == 0 || !leader_lane()) return;
    u64 now = gtimer();
    u32 ps = ((((u32)cmp & 15u) | (wide ? GDRDOCTOR_CMP_WIDE : 0u)) << 16) | (site & 0xffffu);
    publish(r, (GDRDOCTOR_PH_WAITING << 24) | ps, (u64)a, want, seen, now, now, c.iter);
    if (site < c.nsites && ld_volatile_u32(&c.sites[site].line) != line) st_relaxed_u32(&c.sites[site].line, line);
}
__device__ __forceinline__ void mark_done(Ctx& c) {
    c.iter += 1;
    gdrdoctor_record* r = record_of(c);
    if (r && leader_lane()) publish_phase(r, GDRDOCTOR_PH_PROGRESS, c.iter);
}

}  // namespace gdrdoctor

/* The device API. GDRDOCTOR_ENTER(h) atop the kernel (h: its gdrdoctor_launch_t parameter) declares the context
 * the waits use. A wait is 0 when satisfied, 1 when the job was aborted (leave then: results are invalid). */
#define GDRDOCTOR_ENTER(h) gdrdoctor::Ctx gdrdoctor_ctx_ = gdrdoctor::enter(h)
#define GDRDOCTOR_LEAVE() gdrdoctor::leave(gdrdoctor_ctx_)
/* ld.acquire.sys: correct for every writer (host, NIC, peer GPU, same GPU). */
#define GDRDOCTOR_WAIT(addr, cmp, value, site)                                                           \
    gdrdoctor::wait_load<gdrdoctor::ACQUIRE_SYS>(gdrdoctor_ctx_, (addr), (cmp), (value), (unsigned)(site), \
                                                 (unsigned)__LINE__)
#define GDRDOCTOR_WAIT_ACQUIRE_SYS(addr, cmp, value, site) GDRDOCTOR_WAIT(addr, cmp, value, site)
/* ld.acquire.gpu: the writer is a kernel on the same GPU. */
#define GDRDOCTOR_WAIT_ACQUIRE_GPU(addr, cmp, value, site)                                               \
    gdrdoctor::wait_load<gdrdoctor::ACQUIRE_GPU>(gdrdoctor_ctx_, (addr), (cmp), (value), (unsigned)(site), \
                                                 (unsigned)__LINE__)
/* ld.volatile: NCCL's choice ("faster than acquire but not as correct"). */
#define GDRDOCTOR_WAIT_VOLATILE(addr, cmp, value, site)                                                \
    gdrdoctor::wait_load<gdrdoctor::VOLATILE>(gdrdoctor_ctx_, (addr), (cmp), (value), (unsigned)(site), \
                                              (unsigned)__LINE__)
/* ld.relaxed.sys: system scope without acquire ordering (fence yourself before using data). */
#define GDRDOCTOR_WAIT_RELAXED_SYS(addr, cmp, value, site)                                               \
    gdrdoctor::wait_load<gdrdoctor::RELAXED_SYS>(gdrdoctor_ctx_, (addr), (cmp), (value), (unsigned)(site), \
                                                 (unsigned)__LINE__)
/* `load`: a callable returning the word's type (a lambda, cuda::atomic_ref...); `addr` is only recorded. */
#define GDRDOCTOR_WAIT_LOAD(addr, cmp, value, site, load) \
    gdrdoctor::wait(gdrdoctor_ctx_, (addr), (cmp), (value), (unsigned)(site), (unsigned)__LINE__, (load))
#define GDRDOCTOR_ABORTED() gdrdoctor::aborted(gdrdoctor_ctx_)
#define GDRDOCTOR_MARK_WAITING(addr, cmp, value, seen, site)                                                       \
    gdrdoctor::mark_waiting(gdrdoctor_ctx_, (const void*)(addr), (cmp), (unsigned long long)(value),           \
                            (unsigned long long)(seen), (unsigned)(site), (unsigned)__LINE__, sizeof(*(addr)) == 8)
#define GDRDOCTOR_MARK_DONE() gdrdoctor::mark_done(gdrdoctor_ctx_)

#endif /* device side */

/* ----------------------------------------------------------------------------------------- */
/* 3. Host side (not under NVRTC): the shared-memory area, sites, kernels, launches          */
/* ----------------------------------------------------------------------------------------- */

#ifndef __CUDACC_RTC__

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifndef GDRDOCTOR_PROGRESS_NO_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct gdrdoctor_progress {
    void* host;                 /* the job's mapping of the area (NULL: off) */
    unsigned long long dev;     /* device address of the area (0: off) */
    unsigned long long size;    /* bytes */
    int fd;
    int registered;             /* cudaHostRegister succeeded */
    char path[64];              /* /dev/shm/gdrdoctor-<pid>-<n> */
    char error[192];            /* why the area is off, when it is */
} gdrdoctor_progress_t;

typedef struct gdrdoctor_progress_options {
    unsigned int records;     /* warp records in all (default 16384, 1 MiB) */
    unsigned int sites;       /* site ids 0..sites-1 can be named (default 256) */
    unsigned int kernels;     /* kernel slots (default 64, at most 255) */
    unsigned int words;       /* 8-byte words watch can read (default 512) */
    unsigned long long hb_ns; /* heartbeat period of slow waits (default 1 ms) */
    unsigned int flags;       /* GDRDOCTOR_INIT_* */
} gdrdoctor_progress_options_t;

static inline unsigned long long gdrdoctor_realtime_ns_(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* Field 22 of /proc/self/stat (starttime, ticks since boot): with the pid, watch tells a reused pid. */
static inline unsigned long long gdrdoctor_start_ticks_(void) {
    char buf[1024];
    FILE* f = fopen("/proc/self/stat", "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char* p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    /* after ") " come fields 3.. : state is field 3, starttime field 22 */
    int field = 2;
    while (*p && field < 22) {
        if (*p == ' ') field++;
        p++;
    }
    return strtoull(p, NULL, 10);
}

static inline gdrdoctor_area_header* gdrdoctor_header_(const gdrdoctor_progress_t* p) {
    return (gdrdoctor_area_header*)p->host;
}
static inline gdrdoctor_control* gdrdoctor_control_(const gdrdoctor_progress_t* p) {
    return (gdrdoctor_control*)((char*)p->host + GDRDOCTOR_CONTROL_OFFSET);
}

static inline void gdrdoctor_copy_name_(char* dst, size_t cap, const char* src) {
    size_t i = 0;
    if (src)
        for (; i + 1 < cap && src[i]; i++) dst[i] = src[i];
    for (; i < cap; i++) dst[i] = 0;
}

#if !defined(GDRDOCTOR_PROGRESS_NO_CUDA) && defined(__CUDACC__)
static __global__ void gdrdoctor_calibrate_kernel_(unsigned long long* out) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *(volatile unsigned long long*)out = t;
}

/* %globaltimer against CLOCK_REALTIME: five launches, the shortest round trip wins. */
static inline int gdrdoctor_calibrate_(gdrdoctor_progress_t* p) {
    gdrdoctor_area_header* h = gdrdoctor_header_(p);
    gdrdoctor_control* c = gdrdoctor_control_(p);
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return -1;
    unsigned long long out = p->dev + GDRDOCTOR_CONTROL_OFFSET + 16;
    unsigned long long best_rtt = ~0ull;
    long long best_off = 0;
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        c->calib_gt = 0;
        unsigned long long t0 = gdrdoctor_realtime_ns_();
        gdrdoctor_calibrate_kernel_<<<1, 1, 0, s>>>((unsigned long long*)out);
        if (cudaStreamSynchronize(s) != cudaSuccess) break;
        unsigned long long t1 = gdrdoctor_realtime_ns_();
        unsigned long long gt = *(volatile unsigned long long*)&c->calib_gt;
        if (gt == 0) continue;
        if (t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            best_off = (long long)((t0 + t1) / 2) - (long long)gt;
            ok = 1;
        }
    }
    cudaStreamDestroy(s);
    if (!ok) return -1;
    h->gt_offset_ns = best_off;
    h->gt_calib_err_ns = best_rtt / 2;
    __atomic_or_fetch(&h->flags, GDRDOCTOR_AREA_CALIBRATED, __ATOMIC_RELEASE);
    return 0;
}
#endif

/* Create the area, register it for the GPU, publish it. 0: the area is on; 1: GDRDOCTOR_PROGRESS=off; -1: failed
 * (p->error says why); if non-zero the program runs on with bare spins. Call it before the first instrumented
 * launch, after selecting the device (the calibration runs on it). */
static inline int gdrdoctor_progress_init(gdrdoctor_progress_t* p, const char* job,
                                          const gdrdoctor_progress_options_t* opt) {
    memset(p, 0, sizeof(*p));
    p->fd = -1;
    const char* env = getenv("GDRDOCTOR_PROGRESS");
    if (env && (strcmp(env, "off") == 0 || strcmp(env, "0") == 0)) {
        snprintf(p->error, sizeof(p->error), "disabled by GDRDOCTOR_PROGRESS=%s", env);
        return 1;
    }
    unsigned int records = opt && opt->records ? opt->records : 16384u;
    unsigned int sites = opt && opt->sites ? opt->sites : 256u;
    unsigned int kernels = opt && opt->kernels ? opt->kernels : 64u;
    unsigned int words = opt && opt->words ? opt->words : 512u;
    unsigned long long hb_ns = opt && opt->hb_ns ? opt->hb_ns : 1000000ull;
    unsigned int flags = opt ? opt->flags : 0u;
    if (kernels > 255u) kernels = 255u;
    if (sites > 65536u) sites = 65536u;
    if (records > (1u << 22)) records = 1u << 22;
    if (words > (1u << 20)) words = 1u << 20;
    const unsigned long long page = 4096;
    unsigned long long off_sites = 4096;
    unsigned long long off_kernels = (off_sites + 64ull * sites + page - 1) / page * page;
    unsigned long long off_words = (off_kernels + 64ull * kernels + page - 1) / page * page;
    unsigned long long off_records = (off_words + 8ull * words + page - 1) / page * page;
    unsigned long long size = (off_records + 64ull * records + page - 1) / page * page;
    int fd = -1;
    int n;
    char name[40];
    for (n = 0; n < 1000; n++) {
        snprintf(name, sizeof(name), "/gdrdoctor-%d-%d", (int)getpid(), n);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0644);
        if (fd >= 0 || errno != EEXIST) break;
    }
    snprintf(p->path, sizeof(p->path), "/dev/shm%s", name);
    if (fd < 0) {
        snprintf(p->error, sizeof(p->error), "shm_open %s: %s", p->path, strerror(errno));
        return -1;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        snprintf(p->error, sizeof(p->error), "ftruncate %s: %s", p->path, strerror(errno));
        shm_unlink(p->path + 8);
        close(fd);
        return -1;
    }
    void* host = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (host == MAP_FAILED) {
        snprintf(p->error, sizeof(p->error), "mmap %s: %s", p->path, strerror(errno));
        shm_unlink(p->path + 8);
        close(fd);
        return -1;
    }
    p->host = host;
    p->fd = fd;
    p->size = size;
    gdrdoctor_area_header* h = (gdrdoctor_area_header*)host;
    /* The area is zero (ftruncate): every record NOT_STARTED. The magic goes in last. */
    h->version = GDRDOCTOR_PROGRESS_VERSION;
    h->header_size = (unsigned int)sizeof(gdrdoctor_area_header);
    h->pid = (unsigned int)getpid();
    h->start_ticks = gdrdoctor_start_ticks_();
    h->created_ns = gdrdoctor_realtime_ns_();
    h->area_size = size;
    h->host_base = (unsigned long long)(size_t)host;
    h->control_offset = GDRDOCTOR_CONTROL_OFFSET;
    h->site_offset = (unsigned int)off_sites;
    h->site_count = sites;
    h->kernel_offset = (unsigned int)off_kernels;
    h->kernel_count = kernels;
    h->words_offset = (unsigned int)off_words;
    h->words_count = words;
    h->record_offset = (unsigned int)off_records;
    h->record_count = records;
    h->record_size = (unsigned int)sizeof(gdrdoctor_record);
    h->site_size = (unsigned int)sizeof(gdrdoctor_site);
    h->kernel_size = (unsigned int)sizeof(gdrdoctor_kernel);
    h->device = -1;
    gdrdoctor_copy_name_(h->job, sizeof(h->job), job);
    gdrdoctor_control_(p)->hb_ns = hb_ns;
    {
        unsigned int i;
        gdrdoctor_site* s = (gdrdoctor_site*)((char*)host + off_sites);
        for (i = 0; i < sites; i++) {
            s[i].writer_device = -1;
            s[i].writer_kernel = -1;
        }
    }
#ifdef GDRDOCTOR_PROGRESS_NO_CUDA
    (void)flags;
    p->dev = h->host_base;
    h->dev_base = p->dev;
    h->flags |= GDRDOCTOR_AREA_NO_CUDA;
#else
    {
        cudaError_t e = cudaHostRegister(host, (size_t)size, cudaHostRegisterMapped | cudaHostRegisterPortable);
        if (e != cudaSuccess) {
            snprintf(p->error, sizeof(p->error), "cudaHostRegister %s: %s", p->path, cudaGetErrorString(e));
            munmap(host, (size_t)size);
            shm_unlink(p->path + 8);
            close(fd);
            p->host = NULL;
            p->fd = -1;
            return -1;
        }
        p->registered = 1;
        void* d = NULL;
        e = cudaHostGetDevicePointer(&d, host, 0);
        if (e != cudaSuccess) {
            snprintf(p->error, sizeof(p->error), "cudaHostGetDevicePointer %s: %s", p->path, cudaGetErrorString(e));
            cudaHostUnregister(host);
            munmap(host, (size_t)size);
            shm_unlink(p->path + 8);
            close(fd);
            p->host = NULL;
            p->fd = -1;
            p->registered = 0;
            return -1;
        }
        p->dev = (unsigned long long)(size_t)d;
        h->dev_base = p->dev;
        int dev = -1;
        if (cudaGetDevice(&dev) == cudaSuccess) h->device = dev;
#ifdef __CUDACC__
        if (!(flags & GDRDOCTOR_INIT_NO_CALIBRATE)) (void)gdrdoctor_calibrate_(p);
#else
        (void)flags;
#endif
    }
#endif
    __atomic_store_n(&h->magic, GDRDOCTOR_PROGRESS_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

/* The device address of the area (0 when off). */
static inline unsigned long long gdrdoctor_progress_device(const gdrdoctor_progress_t* p) {
    return p->host ? p->dev : 0ull;
}

/* Name site `id` (what it waits for, at most 39 characters) and say who writes its word: writer_kind
 * GDRDOCTOR_WRITER_*, writer_device the writer's CUDA ordinal (a peer GPU) or -1, writer_kernel the slot of the
 * kernel that writes it (gdrdoctor_progress_kernel) or -1. 0, or -1 when the area is off or id out of range. */
static inline int gdrdoctor_progress_site(gdrdoctor_progress_t* p, unsigned int id, const char* name,
                                          unsigned int writer_kind, int writer_device, int writer_kernel) {
    if (!p->host) return -1;
    gdrdoctor_area_header* h = gdrdoctor_header_(p);
    if (id >= h->site_count) return -1;
    gdrdoctor_site* s = (gdrdoctor_site*)((char*)p->host + h->site_offset) + id;
    gdrdoctor_copy_name_(s->name, sizeof(s->name), name);
    s->writer_kind = writer_kind;
    s->writer_device = writer_device;
    s->writer_kernel = writer_kernel;
    __atomic_store_n(&s->flags, 1u, __ATOMIC_RELEASE);
    return 0;
}

/* Declare a kernel of max_blocks x ceil(threads_per_block / 32) records: its slot, or -1 (off or full: bare spins). */
static inline int gdrdoctor_progress_kernel(gdrdoctor_progress_t* p, const char* name, unsigned int max_blocks,
                                            unsigned int threads_per_block) {
    if (!p->host) return -1;
    gdrdoctor_area_header* h = gdrdoctor_header_(p);
    unsigned int warps = (threads_per_block + 31u) / 32u;
    unsigned long long need = (unsigned long long)max_blocks * warps;
    if (warps == 0 || max_blocks == 0 || h->kernels_used >= h->kernel_count ||
        need > (unsigned long long)(h->record_count - h->records_used)) {
        h->dropped += 1;
        return -1;
    }
    unsigned int slot = h->kernels_used;
    gdrdoctor_kernel* k = (gdrdoctor_kernel*)((char*)p->host + h->kernel_offset) + slot;
    gdrdoctor_copy_name_(k->name, sizeof(k->name), name);
    k->rec_base = h->records_used;
    k->max_blocks = max_blocks;
    k->warps_per_block = warps;
    k->device = -1;
#ifndef GDRDOCTOR_PROGRESS_NO_CUDA
    {
        int dev = -1;
        if (cudaGetDevice(&dev) == cudaSuccess) k->device = dev;
    }
#endif
    __atomic_store_n(&k->flags, 1u, __ATOMIC_RELEASE);
    __atomic_store_n(&h->records_used, h->records_used + (unsigned int)need, __ATOMIC_RELEASE);
    __atomic_store_n(&h->kernels_used, slot + 1u, __ATOMIC_RELEASE);
    return (int)slot;
}

/* The handle of one launch of kernel `slot` (pass it by value), counted: watch tells a launch that never started. */
static inline gdrdoctor_launch_t gdrdoctor_progress_launch(gdrdoctor_progress_t* p, int slot) {
    gdrdoctor_launch_t l;
    memset(&l, 0, sizeof(l));
    if (!p->host || slot < 0) return l;
    gdrdoctor_area_header* h = gdrdoctor_header_(p);
    if ((unsigned int)slot >= h->kernels_used) return l;
    gdrdoctor_kernel* k = (gdrdoctor_kernel*)((char*)p->host + h->kernel_offset) + slot;
    unsigned int gen = (k->enqueued + 1u) & 0xffffffu;
    if (gen == 0) gen = 1;
    __atomic_store_n(&k->enqueued, k->enqueued + 1u, __ATOMIC_RELEASE);
    l.records = p->dev + h->record_offset + 64ull * k->rec_base;
    l.control = p->dev + h->control_offset;
    l.sites = p->dev + h->site_offset;
    l.kernel = p->dev + h->kernel_offset + 64ull * (unsigned int)slot;
    l.hb_ns = gdrdoctor_control_(p)->hb_ns;
    l.max_blocks = k->max_blocks;
    l.warps_per_block = k->warps_per_block;
    l.kernel_gen = ((unsigned int)slot << 24) | gen;
    l.nsites = h->site_count;
    return l;
}

/* Find the kernel slot called `name`, declaring it on first use. */
static inline int gdrdoctor_progress_kernel_named(gdrdoctor_progress_t* p, const char* name, unsigned int max_blocks,
                                                  unsigned int threads_per_block) {
    if (!p->host) return -1;
    gdrdoctor_area_header* h = gdrdoctor_header_(p);
    gdrdoctor_kernel* k = (gdrdoctor_kernel*)((char*)p->host + h->kernel_offset);
    char want[32];
    unsigned int i;
    gdrdoctor_copy_name_(want, sizeof(want), name);
    for (i = 0; i < h->kernels_used; i++)
        if (memcmp(k[i].name, want, sizeof(want)) == 0) return (int)i;
    return gdrdoctor_progress_kernel(p, name, max_blocks, threads_per_block);
}

/* One call per launch: declare-or-find the kernel by name and count the launch. */
static inline gdrdoctor_launch_t gdrdoctor_launch(gdrdoctor_progress_t* p, const char* name, unsigned int blocks,
                                                  unsigned int threads_per_block) {
    return gdrdoctor_progress_launch(p, gdrdoctor_progress_kernel_named(p, name, blocks, threads_per_block));
}

#if defined(__cplusplus) && !defined(GDRDOCTOR_PROGRESS_NO_CUDA)
static inline gdrdoctor_launch_t gdrdoctor_launch(gdrdoctor_progress_t* p, const char* name, dim3 grid, dim3 block) {
    return gdrdoctor_launch(p, name, grid.x * grid.y * grid.z, block.x * block.y * block.z);
}
#endif

/* 8-byte words in the area for flags watch can read (stale reads need the value): device and host address. */
static inline unsigned long long gdrdoctor_progress_words_device(const gdrdoctor_progress_t* p) {
    return p->host ? p->dev + gdrdoctor_header_(p)->words_offset : 0ull;
}
static inline unsigned long long* gdrdoctor_progress_words_host(const gdrdoctor_progress_t* p) {
    return p->host ? (unsigned long long*)((char*)p->host + gdrdoctor_header_(p)->words_offset) : NULL;
}

/* The cooperative abort: set by gdrdoctor watch --abort, or by the job itself. */
static inline int gdrdoctor_progress_aborted(const gdrdoctor_progress_t* p) {
    return p->host ? (int)__atomic_load_n(&gdrdoctor_control_(p)->abort, __ATOMIC_ACQUIRE) : 0;
}
static inline void gdrdoctor_progress_abort(gdrdoctor_progress_t* p) {
    if (p->host) __atomic_store_n(&gdrdoctor_control_(p)->abort, 1u, __ATOMIC_RELEASE);
}

/* Unregister, unmap and remove the area. Call it after the last instrumented kernel finished. */
static inline void gdrdoctor_progress_cleanup(gdrdoctor_progress_t* p) {
    if (!p->host) return;
    gdrdoctor_area_header* h = gdrdoctor_header_(p);
    __atomic_or_fetch(&h->flags, GDRDOCTOR_AREA_CLOSED, __ATOMIC_RELEASE);
#ifndef GDRDOCTOR_PROGRESS_NO_CUDA
    if (p->registered) cudaHostUnregister(p->host);
#endif
    munmap(p->host, (size_t)p->size);
    if (p->fd >= 0) close(p->fd);
    if (strncmp(p->path, "/dev/shm", 8) == 0) shm_unlink(p->path + 8);
    p->host = NULL;
    p->dev = 0;
    p->fd = -1;
    p->registered = 0;
}

#endif /* host side */

#endif /* GDRDOCTOR_PROGRESS_CUH */
