// gdrdoctor probe --doorbell: the GPU side of GPU-initiated doorbells (NVSHMEM IBGDA, NCCL's
// GPU-initiated network paths), against an emulated doorbell page in host-mapped memory.
//
// What it writes: db_layouts computes doorbell addresses with the mlx5 formula
// (BAR0 + page_id * unit + offset % 4096) for a table of layouts (4 KiB and 64 KiB pages, UARs
// first and not first in their page, BlueFlame alternation) and stores a marker at each; the
// host checks that every store landed at its expected offset and nowhere else. db_ring waits
// for a host token, writes a 64-byte payload (the WQE stand-in) and then the doorbell with one
// store flavour; the host times token -> doorbell seen and checks the payload was visible first.
//
// What it proves: the arithmetic the GPU uses for doorbells is right, and which store flavour
// delivers the payload before the doorbell at what latency. Nothing here touches a real NIC.

typedef unsigned int u32;
typedef unsigned long long u64;

struct Layout {
    u64 unit;
    u64 page_id;
    u64 reg_offset;  // reg_addr - base_addr (offset in the mmapped system page)
    u64 half;        // BlueFlame: second post goes to the other half (offset ^ half); 0: none
};

#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ * 100 + __CUDACC_VER_MINOR__ >= 1202)
#define HAVE_ST_MMIO 1
#else
#define HAVE_ST_MMIO 0
#endif

__device__ __forceinline__ u64 ld_acquire_sys(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ u32 ld_volatile_u32(const u32* p) {
    u32 v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_weak(u64* p, u64 v) {
    asm volatile("st.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_wt(u64* p, u64 v) {
    asm volatile("st.global.wt.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_volatile(u64* p, u64 v) {
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_mmio(u64* p, u64 v) {
#if HAVE_ST_MMIO
    asm volatile("st.mmio.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
    st_release_sys(p, v);
#endif
}

// Ring every layout once (twice with BlueFlame alternation) with marker i + 1 (+ 0x100 for the
// alternate half).
extern "C" __global__ void db_layouts(u64* bar, const Layout* layouts, u32 n, u32* info) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    info[0] = HAVE_ST_MMIO;
    for (u32 i = 0; i < n; i++) {
        Layout l = layouts[i];
        u64 off = l.page_id * l.unit + (l.reg_offset % 4096);
        st_release_sys((u64*)((char*)bar + off), i + 1);
        if (l.half) st_release_sys((u64*)((char*)bar + (off ^ l.half)), i + 1 + 0x100);
    }
}

// flavour: 0 st.global (weak, no fence), 1 st.global.wt, 2 st.release.sys,
// 3 st.mmio.relaxed.sys (PTX 8.2+; else st.release.sys, info[0] = 0),
// 4 __threadfence_system() + st.volatile, 5 floor: no payload, the token echoed with st.volatile
// (the cheapest store that reaches the host: the ping-pong whose half is the floor).
extern "C" __global__ void db_ring(u64* go, u64* payload, u64* db, u32 n, u32 flavour, u32* abort) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    for (u32 i = 1; i <= n; i++) {
        u32 polls = 0;
        while (ld_acquire_sys(go) != i) {
            if ((++polls & 1023u) == 0 && ld_volatile_u32(abort)) return;
        }
        if (flavour != 5) {
            for (int k = 0; k < 8; k++) st_weak(payload + k, i);
        }
        switch (flavour) {
            case 0: st_weak(db, i); break;
            case 1: st_wt(db, i); break;
            case 2: st_release_sys(db, i); break;
            case 3: st_mmio(db, i); break;
            case 4:
                __threadfence_system();
                st_volatile(db, i);
                break;
            default: st_volatile(db, i); break;
        }
    }
}

// --allow-mmio-write only: one store of `v` to a real doorbell register the GPU mapped (a
// dedicated UAR this process allocated, with no queue attached), to prove the GPU-to-NIC write
// path completes without a fault.
extern "C" __global__ void db_poke(u64* db, u64 v) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    st_mmio(db, v);
}
