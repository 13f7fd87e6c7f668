// gdrdoctor probe --hang: spin-wait kernels that behave like GPU-initiated communication
// (NVSHMEM waits, IBGDA CQ polling, NCCL's device FIFOs), instrumented so that a host thread
// can tell, while they run, which block and warp waits where, on which address, for which
// value, seeing which value, since when.
//
// What they wait on: 64-bit flags in host-mapped memory (or device memory for the ping-pong
// and ring protocols), written by another kernel on another stream, by the last block of the
// same grid, or never (injected faults).
//
// What they prove: on a healthy GPU every protocol completes and its timing is reported; every
// injected fault (never-set flag, occupancy deadlock, cross-stream ordering, stale read, silent
// waiter, a loop that ignores abort) is detected, localised and classified, and the GPU is left
// healthy.
//
// Record layout: one 64-byte HangRecord per waiting agent (thread 0 of each block), the progress
// record of kernels/include/gdrdoctor/progress.cuh (gdrdoctor_record: the same fields at the same
// offsets; checks/src/progress_record.rs, which tests/watch.rs compares with both structs), with
// kernel_gen always 0 and sm_warp = smid << 8 | warpid. Single writer, published with a seqlock:
// seq odd while a multi-field update is in flight, st.release.sys of the even value orders the
// fields before it.
// Waits publish lazily: a wait that completes within 1024 polls writes only `iter` (+0.6% in
// the H200 measurements of knowledge/hang-probe.md section 4.3; here `iter` is published every 256
// waits); a wait still unsatisfied after 1024 polls publishes WAITING with address/expected/
// observed, heartbeats `observed` and `beat_gt` every `hb_ns`, checks the abort flag every 1024
// polls, prints a line once it is older than `slow_ns`, then every `print_ns` while stalled,
// and a final one on abort. Nothing here calls __trap(): a trap poisons the context.
//
// Compiled at run time with NVRTC (-lineinfo) when the node has libnvrtc; otherwise the binary
// carries kernels/ptx/hang.ptx, generated from this file by scripts/gen-ptx.py.

typedef unsigned int u32;
typedef unsigned long long u64;

struct HangRecord {
    u32 seq;
    u32 phase_site;   // phase:8 | cmp:8 | site:16
    u32 block;
    u32 sm_warp;      // smid << 8 | warpid
    u32 kernel_gen;   // 0: the probe knows its launches
    u32 iter;         // completed waits, mod 2^32 (the progress counter)
    u64 addr;         // device address of the awaited word
    u64 expected;
    u64 observed;     // last value the waiter saw (heartbeat)
    u64 wait_start_gt;
    u64 beat_gt;      // %globaltimer of the last heartbeat
};

struct Control {
    u32 abort;
    u32 generation;
    u64 hb_ns;        // heartbeat period
    u64 print_ns;     // printf rate limit per waiter while stalled
    u64 slow_ns;      // a wait this old is "slow": publish + print
    u64 pad[4];
};

struct LaunchRecord {
    u32 state;        // host: 1 ENQUEUED; device: 2 STARTED, 3 DONE
    u32 launch_id;
    u32 blocks_started;
    u32 blocks_done;
    u64 start_gt;
    u64 end_gt;
    u64 value;        // protocol-specific result (spins, items)
    u64 pad[3];
};

#define PH_NOT_STARTED 0u
#define PH_STARTED 1u
#define PH_WAITING 2u
#define PH_PROGRESS 3u
#define PH_DONE 4u
#define PH_ABORTED 5u

#define L_STARTED 2u
#define L_DONE 3u

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
__device__ __forceinline__ u32 warpid() {
    u32 r;
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u64 ld_acquire_sys(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ u64 ld_acquire_gpu(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_gpu_u64(u64* p, u64 v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 ld_volatile_u64(const u64* p) {
    u64 v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ u32 ld_volatile_u32(const u32* p) {
    u32 v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_relaxed_u64(u64* p, u64 v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_u32(u32* p, u32 v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_u32(u32* p, u32 v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_u64(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// The waiter's state, in registers. The record's seqlock counter lives only in the record:
// publishing (slow path) reads it back.
struct Ctx {
    HangRecord* rec;
    Control* ctl;
    u64 iter;
};

__device__ __forceinline__ void publish(HangRecord* rec, u32 phase, u32 site, u64 addr, u64 expected, u64 observed,
                                        u64 ws, u64 now) {
    u32 seq = ld_volatile_u32(&rec->seq);
    st_relaxed_u32(&rec->seq, seq + 1);  // odd: update in flight
    st_relaxed_u32(&rec->phase_site, (phase << 24) | (site & 0xffffffu));
    st_relaxed_u64(&rec->addr, addr);
    st_relaxed_u64(&rec->expected, expected);
    st_relaxed_u64(&rec->observed, observed);
    st_relaxed_u64(&rec->wait_start_gt, ws);
    st_relaxed_u64(&rec->beat_gt, now);
    st_release_u32(&rec->seq, seq + 2);  // even: consistent
}

__device__ __forceinline__ void enter(Ctx& c, HangRecord* recs, Control* ctl, LaunchRecord* lr) {
    c.rec = &recs[blockIdx.x];
    c.ctl = ctl;
    c.iter = 0;
    u64 now = gtimer();
    st_relaxed_u32(&c.rec->block, blockIdx.x);
    st_relaxed_u32(&c.rec->sm_warp, (smid() << 8) | warpid());
    publish(c.rec, PH_STARTED, 0, 0, 0, 0, 0, now);
    if (blockIdx.x == 0) {
        st_relaxed_u64(&lr->start_gt, now);
        st_release_u32(&lr->state, L_STARTED);
    }
    atomicAdd(&lr->blocks_started, 1u);
}

__device__ __forceinline__ void leave(Ctx& c, LaunchRecord* lr, u32 phase) {
    u64 now = gtimer();
    st_relaxed_u32(&c.rec->iter, (u32)c.iter);
    publish(c.rec, phase, 0, 0, 0, 0, 0, now);
    __threadfence_system();
    u32 done = atomicAdd(&lr->blocks_done, 1u) + 1u;
    if (done == gridDim.x) {
        st_relaxed_u64(&lr->end_gt, now);
        st_release_u32(&lr->state, L_DONE);
    }
}

__device__ __noinline__ void say(const char* what, u64 now, u32 site, u64 addr, u64 expected, u64 observed,
                                 u64 waited_ns, u64 polls) {
    printf("gdrdoctor-hang gt=%llu b=%u w=%u site=%u %s addr=0x%llx expect=%llu observed=%llu waited_ms=%llu polls=%llu\n",
           now, blockIdx.x, warpid(), site & 0xffffu, what, addr, expected, observed, waited_ns / 1000000ull, polls);
}

#define CMP_EQ 0u
#define CMP_GE 1u

template <u32 CMP>
__device__ __forceinline__ bool satisfied(u64 v, u64 want) {
    return CMP == CMP_GE ? v >= want : v == want;
}

template <int GPU_SCOPE>
__device__ __forceinline__ u64 load(const u64* p) {
    return GPU_SCOPE ? ld_acquire_gpu(p) : ld_acquire_sys(p);
}

// The slow path of a wait, out of line: entered only after 1024 unsatisfied polls, so the fast
// path keeps the shape of a bare spin (no call, no stack in the polling loop). It publishes
// WAITING (lazily: the wait started at most 1024 polls ago), heartbeats `observed`/`beat_gt`
// every hb_ns, prints once the wait is older than slow_ns and then every print_ns, checks abort
// every 1024 polls, and publishes PROGRESS when satisfied. RELOAD = 0 never reloads the value
// (the stale-read injection). Returns 0 when satisfied, 1 when aborted.
template <u32 CMP, int GPU_SCOPE, int RELOAD>
__device__ __noinline__ int hp_wait_slow(HangRecord* rec, Control* ctl, const u64* a, u64 want, u32 site, u64 v,
                                         u64 iter) {
    site |= CMP << 16;
    u64 now = gtimer();
    u64 t0 = now, last_beat = now, last_print = now;
    bool said = false;
    u64 polls = 1024;
    publish(rec, PH_WAITING, site, (u64)a, want, v, t0, now);
    while (true) {
        for (u32 k = 0; k < 1024; k++) {
            if (RELOAD) {
                v = load<GPU_SCOPE>(a);
                if (satisfied<CMP>(v, want)) {
                    st_relaxed_u32(&rec->iter, (u32)(iter + 1));
                    publish(rec, PH_PROGRESS, site, (u64)a, want, v, t0, gtimer());
                    return 0;
                }
            }
        }
        polls += 1024;
        now = gtimer();
        if (now - last_beat >= ctl->hb_ns) {
            last_beat = now;
            st_relaxed_u64(&rec->observed, v);
            st_relaxed_u64(&rec->beat_gt, now);
        }
        if (blockIdx.x < 32) {
            if (!said && now - t0 >= ctl->slow_ns) {
                said = true;
                last_print = now;
                say("SLOW", now, site, (u64)a, want, v, now - t0, polls);
            } else if (said && now - last_print >= ctl->print_ns) {
                last_print = now;
                say("STALLED", now, site, (u64)a, want, v, now - t0, polls);
            }
        }
        if (ld_volatile_u32(&ctl->abort)) {
            publish(rec, PH_ABORTED, site, (u64)a, want, v, t0, now);
            if (blockIdx.x < 32) say("ABORTED", now, site, (u64)a, want, v, now - t0, polls);
            return 1;
        }
    }
}

// Wait until *a satisfies CMP against want. The first 1024 polls are a bare spin; a wait that
// lasts longer continues in hp_wait_slow. Returns 0 when satisfied, 1 when aborted.
template <u32 CMP, int GPU_SCOPE, int RELOAD>
__device__ __forceinline__ int hp_wait(Ctx& c, const u64* a, u64 want, u32 site) {
    u64 v = load<GPU_SCOPE>(a);
    if (!satisfied<CMP>(v, want)) {
        bool ok = false;
        if (RELOAD) {
            for (u32 k = 0; k < 1024; k++) {
                v = load<GPU_SCOPE>(a);
                if (satisfied<CMP>(v, want)) {
                    ok = true;
                    break;
                }
            }
        }
        if (!ok && hp_wait_slow<CMP, GPU_SCOPE, RELOAD>(c.rec, c.ctl, a, want, site, v, c.iter)) return 1;
    }
    // The progress counter is published every 256 completed waits (and by every slow wait):
    // a stall is a published WAITING record, so the fast path needs no store per wait.
    c.iter += 1;
    if ((c.iter & 255u) == 0) st_relaxed_u32(&c.rec->iter, (u32)c.iter);
    return 0;
}

// The silent waiters of the injection suite: publish WAITING once, then poll without heartbeats
// (ABORTABLE = 1 still checks the abort flag every 1024 polls; 0 never does).
template <int ABORTABLE>
__device__ __forceinline__ int hp_wait_silent(Ctx& c, const u64* a, u64 want, u32 site) {
    u64 v = ld_acquire_sys(a);
    if (v == want) return 0;
    u64 t0 = gtimer();
    publish(c.rec, PH_WAITING, site, (u64)a, want, v, t0, t0);
    if (blockIdx.x < 32) say("WAIT-SILENT", t0, site, (u64)a, want, v, 0, 0);
    u64 polls = 0;
    while (ld_volatile_u64(a) != want) {
        if (ABORTABLE && (++polls & 1023u) == 0 && ld_volatile_u32(&c.ctl->abort)) {
            u64 now = gtimer();
            publish(c.rec, PH_ABORTED, site, (u64)a, want, v, t0, now);
            if (blockIdx.x < 32) say("ABORTED", now, site, (u64)a, want, v, now - t0, polls);
            return 1;
        }
    }
    return 0;
}

// One waiter per block waits for *flag == expected.
extern "C" __global__ void hp_wait_flag(Control* ctl, HangRecord* recs, LaunchRecord* lr, const u64* flag,
                                        u64 expected, u32 site, u32 flavour) {
    if (threadIdx.x != 0) return;
    Ctx c;
    enter(c, recs, ctl, lr);
    if (ld_volatile_u32(&ctl->abort)) {
        leave(c, lr, PH_ABORTED);
        return;
    }
    int aborted = 0;
    switch (flavour) {
        case 0: aborted = hp_wait<CMP_EQ, 0, 1>(c, flag, expected, site); break;
        case 1: aborted = hp_wait<CMP_EQ, 0, 0>(c, flag, expected, site); break;
        case 2: aborted = hp_wait_silent<1>(c, flag, expected, site); break;
        default: aborted = hp_wait_silent<0>(c, flag, expected, site); break;
    }
    leave(c, lr, aborted ? PH_ABORTED : PH_DONE);
}

// Sets *flag = value after delay_ns (release store, system scope).
extern "C" __global__ void hp_set_flag(Control* ctl, HangRecord* recs, LaunchRecord* lr, u64* flag, u64 value,
                                       u64 delay_ns) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    Ctx c;
    enter(c, recs, ctl, lr);
    u64 t0 = gtimer();
    while (gtimer() - t0 < delay_ns) {
        if (ld_volatile_u32(&ctl->abort)) {
            leave(c, lr, PH_ABORTED);
            return;
        }
    }
    st_release_u64(flag, value);
    leave(c, lr, PH_DONE);
}

// The last block of the grid sets the flag every other block waits for: fine while the whole
// grid is resident, a forward-progress deadlock when the grid exceeds what fits on the GPU.
extern "C" __global__ void hp_last_block_sets(Control* ctl, HangRecord* recs, LaunchRecord* lr, u64* flag,
                                              u64 value, u32 site) {
    if (threadIdx.x != 0) return;
    Ctx c;
    enter(c, recs, ctl, lr);
    if (ld_volatile_u32(&ctl->abort)) {
        leave(c, lr, PH_ABORTED);
        return;
    }
    if (blockIdx.x == gridDim.x - 1) {
        st_release_u64(flag, value);
        leave(c, lr, PH_DONE);
        return;
    }
    int aborted = hp_wait<CMP_EQ, 0, 1>(c, flag, value, site);
    leave(c, lr, aborted ? PH_ABORTED : PH_DONE);
}

// Ping-pong between block 0 and block 1 through two device-memory words (acquire/release at
// .gpu scope: same-GPU producer), n round trips.
// instrumented = 0: bare acquire spins; 1: the hp_wait instrumentation. lr->start_gt/end_gt
// bracket the n round trips.
extern "C" __global__ void hp_pingpong(Control* ctl, HangRecord* recs, LaunchRecord* lr, u64* ping, u64* pong,
                                       u32 n, u32 instrumented) {
    if (threadIdx.x != 0 || blockIdx.x > 1) return;
    Ctx c;
    c.rec = &recs[blockIdx.x];
    c.ctl = ctl;
    c.iter = 0;
    if (instrumented) enter(c, recs, ctl, lr);
    u64 t0 = gtimer();
    for (u32 i = 1; i <= n; i++) {
        if (blockIdx.x == 0) {
            st_release_gpu_u64(ping, i);
            if (instrumented) {
                if (hp_wait<CMP_EQ, 1, 1>(c, pong, i, 1)) break;
            } else {
                while (ld_acquire_gpu(pong) != i) {
                }
            }
        } else {
            if (instrumented) {
                if (hp_wait<CMP_EQ, 1, 1>(c, ping, i, 2)) break;
            } else {
                while (ld_acquire_gpu(ping) != i) {
                }
            }
            st_release_gpu_u64(pong, i);
        }
    }
    if (blockIdx.x == 0) {
        st_relaxed_u64(&lr->start_gt, t0);
        st_relaxed_u64(&lr->end_gt, gtimer());
    }
    if (instrumented) leave(c, lr, PH_DONE);
}

// A single-producer single-consumer ring of `slots` entries in device memory (like NCCL's
// device FIFOs): block 0 produces n items, block 1 consumes them. Throughput protocol.
extern "C" __global__ void hp_ring(Control* ctl, HangRecord* recs, LaunchRecord* lr, u64* head, u64* tail,
                                   u64* slots, u32 nslots, u32 n, u32 instrumented) {
    if (threadIdx.x != 0 || blockIdx.x > 1) return;
    Ctx c;
    c.rec = &recs[blockIdx.x];
    c.ctl = ctl;
    c.iter = 0;
    if (instrumented) enter(c, recs, ctl, lr);
    u64 t0 = gtimer();
    u64 sum = 0;
    if (blockIdx.x == 0) {
        for (u64 i = 0; i < n; i++) {
            // Wait for space: tail > i - nslots.
            if (i >= nslots) {
                u64 need = i - nslots + 1;
                if (instrumented) {
                    if (hp_wait<CMP_GE, 1, 1>(c, tail, need, 3)) goto out;
                } else {
                    while (ld_acquire_gpu(tail) < need) {
                    }
                }
            }
            slots[i % nslots] = i * 2654435761ull;
            st_release_gpu_u64(head, i + 1);
        }
    } else {
        for (u64 i = 0; i < n; i++) {
            if (instrumented) {
                if (hp_wait<CMP_GE, 1, 1>(c, head, i + 1, 4)) goto out;
            } else {
                while (ld_acquire_gpu(head) < i + 1) {
                }
            }
            sum += slots[i % nslots];
            st_release_gpu_u64(tail, i + 1);
        }
        st_relaxed_u64(&lr->value, sum);
    }
out:
    if (blockIdx.x == 1) {
        st_relaxed_u64(&lr->start_gt, t0);
        st_relaxed_u64(&lr->end_gt, gtimer());
    }
    if (instrumented) leave(c, lr, PH_DONE);
}

// Writes %globaltimer when the host asks: clock calibration (best round trip wins).
extern "C" __global__ void hp_clock(Control* ctl, u64* req, u64* resp, u32 rounds) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    for (u32 i = 1; i <= rounds; i++) {
        while (ld_volatile_u64(req) != i) {
            if (ld_volatile_u32(&ctl->abort)) return;
        }
        st_release_u64(resp, gtimer());
    }
}
