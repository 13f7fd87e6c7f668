// p2p-anchor: the CUDA runtime doing the copies `gdrdoctor probe --p2p` times, so the two can be
// compared in one run (docs/performance.md). Not part of gdrdoctor; built on the GPU machine:
//
//   nvcc -O2 -o p2p-anchor scripts/p2p-anchor.cu && ./p2p-anchor [MiB=64] [reps=20]
//
// For every ordered GPU pair with peer access: a->b, b->a and both at once (two streams) with
// cudaMemcpyPeerAsync timed by events (GB/s = 1e9 bytes/s), and 4-byte copies back to back,
// host-timed (us per copy). One GPU: the same copies inside GPU 0 as the reference. One JSON
// object per line.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,              \
                   cudaGetErrorString(e_));                                        \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

static double copies(void *dst, int dd, const void *src, int sd, size_t n, int reps,
                     cudaStream_t s) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaMemcpyPeerAsync(dst, dd, src, sd, n, s));  // warm-up
  CK(cudaEventRecord(a, s));
  for (int i = 0; i < reps; i++) CK(cudaMemcpyPeerAsync(dst, dd, src, sd, n, s));
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return (double)n * reps / (ms * 1e-3) / 1e9;
}

static double latency_us(void *dst, int dd, const void *src, int sd, cudaStream_t s) {
  const int n = 1000;
  for (int i = 0; i < 10; i++) CK(cudaMemcpyPeerAsync(dst, dd, src, sd, 4, s));
  CK(cudaStreamSynchronize(s));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) CK(cudaMemcpyPeerAsync(dst, dd, src, sd, 4, s));
  CK(cudaStreamSynchronize(s));
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  size_t n = mib << 20;
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  void **buf = new void *[count * 2];
  cudaStream_t *st = new cudaStream_t[count];
  for (int d = 0; d < count; d++) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&buf[2 * d], n));
    CK(cudaMalloc(&buf[2 * d + 1], n));
    CK(cudaMemset(buf[2 * d], 1, n));
    CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
  }
  if (count == 1) {
    CK(cudaSetDevice(0));
    double bw = copies(buf[1], 0, buf[0], 0, n, reps, st[0]);
    double lat = latency_us(buf[1], 0, buf[0], 0, st[0]);
    std::printf("{\"a\":0,\"b\":0,\"reference\":true,\"uni_gbps\":%.1f,\"latency_us\":%.2f}\n",
                bw, lat);
  }
  for (int a = 0; a < count; a++) {
    for (int b = a + 1; b < count; b++) {
      int ab = 0, ba = 0;
      CK(cudaDeviceCanAccessPeer(&ab, a, b));
      CK(cudaDeviceCanAccessPeer(&ba, b, a));
      if (!ab || !ba) {
        std::printf("{\"a\":%d,\"b\":%d,\"can_access\":false}\n", a, b);
        continue;
      }
      CK(cudaSetDevice(a));
      cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
      CK(cudaSetDevice(b));
      e = cudaDeviceEnablePeerAccess(a, 0);
      if (e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
      (void)cudaGetLastError();
      CK(cudaSetDevice(a));
      double uni = copies(buf[2 * b + 1], b, buf[2 * a], a, n, reps, st[a]);
      CK(cudaSetDevice(b));
      double back = copies(buf[2 * a + 1], a, buf[2 * b], b, n, reps, st[b]);
      // Both directions at once: one stream per source GPU, one pair of events spanning both.
      cudaEvent_t s0, e0, e1;
      CK(cudaSetDevice(a));
      CK(cudaEventCreate(&s0));
      CK(cudaEventCreate(&e0));
      CK(cudaSetDevice(b));
      CK(cudaEventCreate(&e1));
      CK(cudaSetDevice(a));
      CK(cudaEventRecord(s0, st[a]));
      CK(cudaStreamWaitEvent(st[b], s0, 0));
      for (int i = 0; i < reps; i++) {
        CK(cudaMemcpyPeerAsync(buf[2 * b + 1], b, buf[2 * a], a, n, st[a]));
        CK(cudaMemcpyPeerAsync(buf[2 * a + 1], a, buf[2 * b], b, n, st[b]));
      }
      CK(cudaSetDevice(b));
      CK(cudaEventRecord(e1, st[b]));
      CK(cudaSetDevice(a));
      CK(cudaStreamWaitEvent(st[a], e1, 0));
      CK(cudaEventRecord(e0, st[a]));
      CK(cudaEventSynchronize(e0));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, s0, e0));
      double bidi = 2.0 * n * reps / (ms * 1e-3) / 1e9;
      double lat = latency_us(buf[2 * b + 1], b, buf[2 * a], a, st[a]);
      std::printf("{\"a\":%d,\"b\":%d,\"can_access\":true,\"uni_gbps\":%.1f,\"uni_back_gbps\":%.1f,"
                  "\"bidi_gbps\":%.1f,\"latency_us\":%.2f,\"size_mib\":%zu,\"reps\":%d}\n",
                  a, b, uni, back, bidi, lat, mib, reps);
    }
  }
  return 0;
}
