"""Run rendered CUDA kernels on the CPU, for tests on machines without a GPU.

Kernels written in plain CUDA C++ (the elementwise, generic, row-reduction and SIMT product
templates, the kernel-IR renderer's), the tensor-core product and the mma.sync flash attention
(their PTX helpers emulated: cp.async, ldmatrix, mma.sync, ex2) and Hopper's wgmma and TMA
products and wgmma flash attention (wgmma from shared memory or register fragments, TMA copies,
mbarriers, named barriers, two-block clusters) are compiled with the host
compiler against CUDA's half-precision headers. Kernels without barriers, shared memory or
shuffles run thread by thread, one block after another; the others run a block's threads as
fibers that meet at barriers and exchange values at shuffles (THREADS). Asynchronous operations
complete as late as the GPU allows (cp.async copies and wgmma at the waits that retire their
groups, TMA stores at the bulk wait), so a kernel that reads or frees their memory too early
computes wrong values here too. Not a timing tool; a semantics check.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading

import numpy as np

from backends.cuda.templates.prelude import FLOAT_TO_INT, REDUCTIONS

# A block's threads as fibers (ucontext), for kernels with shared memory, barriers and warp
# shuffles: one fiber runs until it reaches a barrier, a shuffle or its end, then the next; a
# barrier lets its fibers go once every live thread of the block (a shuffle: of the warp) has
# reached it. Threads that have returned no longer count (a kernel's early exit). `__shared__`
# arrays are function statics: one copy, shared by the block's threads, and blocks run one
# after another. Deterministic: the threads always run in the same order. A fiber starts on its
# own stack through ucontext; later switches are _setjmp / _longjmp, which leave the signal
# mask alone (swapcontext's system call per switch made barrier-heavy kernels slow).
THREADS = r"""
#include <ucontext.h>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define __shared__ static
#define __syncthreads() saturn_wait(SATURN_AT_BARRIER)
#define __syncwarp(...) saturn_wait(SATURN_AT_WARP)
enum saturn_state { SATURN_RUNNING, SATURN_AT_BARRIER, SATURN_AT_WARP, SATURN_DONE, SATURN_SPIN };
// bumped by every event a polling fiber may wait for (an arrival, a copy landing): a round of
// the scheduler in which only polling fibers ran and this did not move is a deadlock
static unsigned long long saturn_progress = 0;
struct saturn_fiber { ucontext_t ctx; jmp_buf resume; saturn_state state; bool started; char* stack; };
static const size_t SATURN_STACK = 1 << 18;
static saturn_fiber* saturn_fibers = nullptr;
static unsigned saturn_nthreads = 0, saturn_capacity = 0, saturn_current = 0;   // fibers running, made
// a cluster's blocks run together, block `saturn_rank` of the fiber running with its own arena,
// barriers and threadIdx; blockIdx.x is saturn_block_base + its rank
static unsigned saturn_block = 0, saturn_rank = 0, saturn_cluster = 1, saturn_block_base = 0;
static jmp_buf saturn_scheduler;
static unsigned long long saturn_slots[2048];
static void (*saturn_body)() = nullptr;

static void saturn_wait(saturn_state s) {
  saturn_fiber& f = saturn_fibers[saturn_current];
  f.state = s;
  if (!_setjmp(f.resume)) _longjmp(saturn_scheduler, 1);
}
static void saturn_spin() { saturn_wait(SATURN_SPIN); }   // poll again in the next round
static void saturn_thread_ends();     // (what a thread left queued: its stores are stored, its copies land)
static void saturn_trampoline() {
  saturn_body();
  saturn_thread_ends();
  saturn_fibers[saturn_current].state = SATURN_DONE;
  _longjmp(saturn_scheduler, 1);
}
// the value `v` of lane `src` of the calling thread's warp (its own where that lane has left)
template <class T> static T saturn_shuffle(T v, int src) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  unsigned me = saturn_current, from = (me & ~31u) + (unsigned)src;
  std::memcpy(&saturn_slots[me], &v, sizeof(T));
  saturn_wait(SATURN_AT_WARP);
  T got = v;
  if (src >= 0 && src < 32 && from < saturn_nthreads && saturn_fibers[from].state != SATURN_DONE)
    std::memcpy(&got, &saturn_slots[from], sizeof(T));
  saturn_wait(SATURN_AT_WARP);     // (no lane writes its slot again before every lane has read)
  return got;
}
template <class T> static T __shfl_xor_sync(unsigned, T v, int o, int = 32) { return saturn_shuffle(v, (int)(saturn_current & 31) ^ o); }
template <class T> static T __shfl_sync(unsigned, T v, int src, int = 32) { return saturn_shuffle(v, src & 31); }
template <class T> static T __shfl_down_sync(unsigned, T v, unsigned d, int = 32) {
  int l = (int)(saturn_current & 31) + (int)d; return saturn_shuffle(v, l < 32 ? l : (int)(saturn_current & 31)); }
template <class T> static T __shfl_up_sync(unsigned, T v, unsigned d, int = 32) {
  int l = (int)(saturn_current & 31) - (int)d; return saturn_shuffle(v, l >= 0 ? l : (int)(saturn_current & 31)); }
// cp.async lands when a wait retires its group: a thread's copies wait in its queue (their group:
// the thread's commits before them) and land at the cp.async.wait_group that retires them (or
// when the thread ends), so a tile read before its wait holds what was there before, as it may
// on the GPU. Kernels run thread by thread (no fibers) copy at once.
static bool saturn_fibered = false;
struct saturn_copy_op { unsigned char* dst; const void* src; int bytes, width, group; };
static std::vector<saturn_copy_op>* saturn_copy_queue = nullptr;    // per fiber
static int* saturn_copy_groups = nullptr;                           // per fiber: commits so far
static void saturn_copy_land(const saturn_copy_op& op) {
  if (op.bytes) std::memcpy(op.dst, op.src, op.bytes);
  if (op.bytes < op.width) std::memset(op.dst + op.bytes, 0, op.width - op.bytes); }
static void saturn_copy(unsigned char* dst, const void* src, int bytes, int width) {
  saturn_copy_op op{dst, src, bytes, width, 0};
  if (!saturn_fibered) { saturn_copy_land(op); return; }
  op.group = saturn_copy_groups[saturn_current];
  saturn_copy_queue[saturn_current].push_back(op); }
// runs (in order) and drops a queue's operations of the groups before `upto`
template <class Op, class F> static void saturn_retire(std::vector<Op>& q, int upto, F run) {
  size_t i = 0;
  for (; i < q.size() && q[i].group < upto; ++i) run(q[i]);
  q.erase(q.begin(), q.begin() + i); }
static void saturn_copies_land(int upto) { saturn_retire(saturn_copy_queue[saturn_current], upto, saturn_copy_land); }
static void cp_async4(void* dst, const void* src, int src_bytes) { saturn_copy((unsigned char*)dst, src, src_bytes ? 4 : 0, 4); }
static void cp_async_commit() { if (saturn_fibered) saturn_copy_groups[saturn_current]++; }
template <int N> static void cp_async_wait() { if (saturn_fibered) saturn_copies_land(saturn_copy_groups[saturn_current] - N); }
// The tensor-core product's helpers: dynamic shared memory is one arena (smem_u32 gives an
// offset into it); ldmatrix and mma.sync are warp-collective: every lane posts its address or
// fragments, then each takes what the instruction gives it (PTX ISA, m8n8 matrices and the
// m16n8k16 fragment layouts: group g = lane / 4, c = lane % 4)
alignas(1024) static unsigned char saturn_arenas[2][232448];
#define saturn_smem (saturn_arenas[saturn_rank])
static uint32_t saturn_words[2048][6];
static inline uint32_t smem_u32(const void* p) { return (uint32_t)((const unsigned char*)p - saturn_smem); }
static void cp_async16(uint32_t dst, const void* src, int src_bytes) { saturn_copy(saturn_smem + dst, src, src_bytes, 16); }
static void saturn_ldsm(uint32_t* r, uint32_t addr, bool trans) {
  unsigned me = saturn_current, lane = me & 31, base = me - lane;
  saturn_words[me][0] = addr;
  saturn_wait(SATURN_AT_WARP);
  for (unsigned i = 0; i < 4; ++i) {
    if (!trans) {       // matrix i, row lane / 4, columns 2c and 2c + 1
      std::memcpy(&r[i], saturn_smem + saturn_words[base + i * 8 + lane / 4][0] + (lane % 4) * 4, 4);
    } else {            // matrix i, column lane / 4 of rows 2c and 2c + 1
      uint16_t lo, hi;
      std::memcpy(&lo, saturn_smem + saturn_words[base + i * 8 + (lane % 4) * 2][0] + (lane / 4) * 2, 2);
      std::memcpy(&hi, saturn_smem + saturn_words[base + i * 8 + (lane % 4) * 2 + 1][0] + (lane / 4) * 2, 2);
      r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
  }
  saturn_wait(SATURN_AT_WARP);
}
static void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  uint32_t r[4]; saturn_ldsm(r, addr, false); r0 = r[0]; r1 = r[1]; r2 = r[2]; r3 = r[3]; }
static void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  uint32_t r[4]; saturn_ldsm(r, addr, true); r0 = r[0]; r1 = r[1]; r2 = r[2]; r3 = r[3]; }
static float saturn_f16(uint16_t b) { __half_raw r; r.x = b; return __half2float(__half(r)); }
static float saturn_bf16(uint16_t b) { __nv_bfloat16_raw r; r.x = b; return __bfloat162float(__nv_bfloat16(r)); }
// D += A(16x16) B(16x8): A's element (r, k) is in lane (r % 8) * 4 + (k % 8) / 2, register
// (r >= 8) + 2 (k >= 8); B's (k, n) in lane n * 4 + (k % 8) / 2, register k >= 8; D's j-th
// value of a lane is (g + 8 (j / 2), 2c + j % 2)
static void saturn_mma(float* d, const uint32_t* a, uint32_t b0, uint32_t b1, float (*cv)(uint16_t)) {
  unsigned me = saturn_current, lane = me & 31, base = me - lane;
  for (int i = 0; i < 4; ++i) saturn_words[me][i] = a[i];
  saturn_words[me][4] = b0; saturn_words[me][5] = b1;
  saturn_wait(SATURN_AT_WARP);
  auto half = [&](unsigned l, int reg, int k) {
    uint32_t w = saturn_words[base + l][reg]; return cv((uint16_t)((k & 1) ? w >> 16 : w & 0xffffu)); };
  int g = (int)lane / 4, c = (int)lane % 4;
  float out[4];
  for (int j = 0; j < 4; ++j) {
    int row = g + 8 * (j / 2), col = 2 * c + j % 2;
    float s = d[j];
    for (int k = 0; k < 16; ++k)
      s += half((row % 8) * 4 + (k % 8) / 2, (row >= 8) + 2 * (k >= 8), k) * half(col * 4 + (k % 8) / 2, 4 + (k >= 8), k);
    out[j] = s;
  }
  saturn_wait(SATURN_AT_WARP);     // (every lane has read the fragments)
  for (int j = 0; j < 4; ++j) d[j] = out[j];
}
// MUFU.EX2 with flush to zero: results below 2^-126 are 0
static inline float ex2_ftz(float x) { float y = exp2f(x); return std::fabs(y) < 1.17549435e-38f ? 0.f : y; }
static void mma_f16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { saturn_mma(d, a, b0, b1, saturn_f16); }
static void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { saturn_mma(d, a, b0, b1, saturn_bf16); }
static uint32_t pack_f16(float lo, float hi) {
  __half a = __float2half_rn(lo), b = __float2half_rn(hi); uint16_t x, y;
  std::memcpy(&x, &a, 2); std::memcpy(&y, &b, 2); return (uint32_t)x | ((uint32_t)y << 16); }
static uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat16 a = __float2bfloat16_rn(lo), b = __float2bfloat16_rn(hi); uint16_t x, y;
  std::memcpy(&x, &a, 2); std::memcpy(&y, &b, 2); return (uint32_t)x | ((uint32_t)y << 16); }
template <class T> static T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T> static T atomicOr(T* p, T v) { T old = *p; *p = old | v; return old; }
template <class T> static T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }

// Hopper's product helpers (templates/gemm_tma.py, gemm_wgmma.py), emulated: their device
// definitions sit behind these guards. mbarriers are a table beside the arena (by address);
// a TMA copy moves its box at once (128-byte swizzle, zeros past the edges) and completes its
// bytes on the barrier; wgmma computes each thread's accumulators from the descriptors (K-major
// or, transposed, MN-major operands, 128-byte swizzle) at the wait that retires it, and a TMA
// store reads its tile at the bulk wait after it: as late as the GPU may, so an operand freed or
// overwritten too early gives wrong values. A tensor map here is the host's own: base, rank,
// element size, dims, byte strides of the outer dims, box.
#define SATURN_MBAR
#define SATURN_WGMMA_COMMON
#define __grid_constant__
struct TensorMap { unsigned long long bits[16]; };
struct saturn_mbar { int count, pending, tx; unsigned phase; };
static saturn_mbar saturn_mbars[2][sizeof(saturn_arenas[0]) / 8];
static saturn_mbar& saturn_bar(uint32_t a, unsigned rank) { return saturn_mbars[rank][a / 8]; }
static saturn_mbar& saturn_bar(uint32_t a) { return saturn_bar(a, saturn_rank); }
static void saturn_bar_step(saturn_mbar& b) {
  if (b.pending == 0 && b.tx == 0) { b.phase++; b.pending = b.count; }
  saturn_progress++;
}
static void mbar_init(uint32_t bar, int count) { saturn_bar(bar) = {count, count, 0, 0}; saturn_progress++; }
static void mbar_fence_init() {}
static void mbar_expect_tx(uint32_t bar, uint32_t bytes) { saturn_mbar& b = saturn_bar(bar); b.tx += (int)bytes; b.pending--; saturn_bar_step(b); }
// an arrival that completes a phase hands over at once: the threads waiting for it (a producer
// refilling the stage) run before this one goes on, as they may on the GPU
static void saturn_arrive(saturn_mbar& b) {
  const unsigned phase = b.phase;
  b.pending--; saturn_bar_step(b);
  if (b.phase != phase) saturn_spin();
}
static void mbar_arrive(uint32_t bar) { saturn_arrive(saturn_bar(bar)); }
// returns once the phase of this parity has completed (the current phase is incomplete)
static void mbar_wait(uint32_t bar, uint32_t parity) { while ((saturn_bar(bar).phase & 1u) == parity) saturn_spin(); }
// a barrier's threads must name one count (undefined on the GPU otherwise): the largest named
// in a generation is what completes it, so a mismatch is a deadlock here in any order of arrival
struct saturn_named { int arrived, count; unsigned generation; };
static saturn_named saturn_named_bars[2][17];     // a block's 16, then the cluster's (at rank 0)
static void saturn_named_arrive(saturn_named& b, int n) {
  b.count = n > b.count ? n : b.count;
  if (++b.arrived == b.count) { b.arrived = 0; b.count = 0; b.generation++; }
  saturn_progress++;
}
static void saturn_named_sync(saturn_named& b, int n) {
  const unsigned g = b.generation;
  saturn_named_arrive(b, n);
  while (b.generation == g) saturn_spin();
}
static void named_arrive(int id, int n) { saturn_named_arrive(saturn_named_bars[saturn_rank][id], n); }
static void named_sync(int id, int n) { saturn_named_sync(saturn_named_bars[saturn_rank][id], n); }
#define __cluster_dims__(...)
static uint32_t cluster_rank() { return saturn_rank; }
static void cluster_sync() { saturn_named_sync(saturn_named_bars[0][16], (int)saturn_nthreads); }
static void mbar_arrive_cta(uint32_t bar, uint32_t cta) { saturn_arrive(saturn_bar(bar, cta)); }
static void mbar_arrive_cta_release(uint32_t bar, uint32_t cta) { mbar_arrive_cta(bar, cta); }
static void mbar_wait_cluster(uint32_t bar, uint32_t parity) { mbar_wait(bar, parity); }
static void st_shared_f4(uint32_t at, float a, float b, float c, float d) {
  const float v[4] = {a, b, c, d}; std::memcpy(saturn_smem + at, v, 16); }
static void ld_cluster_f4(uint32_t at, uint32_t cta, float* v) { std::memcpy(v, saturn_arenas[cta] + at, 16); }
template <int R> static void regs_dec() {}
template <int R> static void regs_inc() {}
static inline uint32_t saturn_swizzle(uint32_t a) { return a ^ (((a >> 7) & 7u) << 4); }
// every element of the box at coordinates c (innermost first) and the matching place in shared
// memory at `at`: f(global pointer or null past the edges, shared address)
template <class F> static void saturn_box(const TensorMap* m, uint32_t at, const int* c, F f) {
  const unsigned long long* w = m->bits;
  const int rank = (int)w[1], size = (int)w[2];
  long long dims[3] = {(long long)w[3], (long long)w[4], rank > 2 ? (long long)w[5] : 1};
  long long box[3] = {(long long)w[8], (long long)w[9], rank > 2 ? (long long)w[10] : 1};
  for (long long z = 0; z < box[2]; ++z)
    for (long long y = 0; y < box[1]; ++y)
      for (long long x = 0; x < box[0]; ++x) {
        const long long gx = c[0] + x, gy = c[1] + y, gz = rank > 2 ? c[2] + z : 0;
        const bool in = gx >= 0 && gx < dims[0] && gy >= 0 && gy < dims[1] && gz >= 0 && gz < dims[2];
        unsigned char* g = in ? (unsigned char*)w[0] + gx * size + gy * (long long)w[6] + gz * (long long)w[7] : nullptr;
        f(g, saturn_swizzle(at + (uint32_t)(((z * box[1] + y) * box[0] + x) * size)), size);
      }
}
// into the arena and onto the barrier of each block of the cluster in `mask`
static void saturn_tma_load(uint32_t dst, const void* map, const int* c, uint32_t bar, unsigned mask) {
  for (unsigned r = 0; r < saturn_cluster; ++r) {
    if (!((mask >> r) & 1u)) continue;
    int bytes = 0;
    saturn_box((const TensorMap*)map, dst, c, [&](unsigned char* g, uint32_t s, int size) {
      if (g) std::memcpy(saturn_arenas[r] + s, g, size); else std::memset(saturn_arenas[r] + s, 0, size);
      bytes += size; });
    saturn_bar(bar, r).tx -= bytes; saturn_bar_step(saturn_bar(bar, r));
  }
}
static void tma_load_2d(uint32_t dst, const void* map, int x, int y, uint32_t bar) { int c[3] = {x, y, 0}; saturn_tma_load(dst, map, c, bar, 1u << saturn_rank); }
static void tma_load_3d(uint32_t dst, const void* map, int x, int y, int z, uint32_t bar) { int c[3] = {x, y, z}; saturn_tma_load(dst, map, c, bar, 1u << saturn_rank); }
static void tma_load_2d_mc(uint32_t dst, const void* map, int x, int y, uint32_t bar, uint16_t mask) { int c[3] = {x, y, 0}; saturn_tma_load(dst, map, c, bar, mask); }
static void tma_load_3d_mc(uint32_t dst, const void* map, int x, int y, int z, uint32_t bar, uint16_t mask) { int c[3] = {x, y, z}; saturn_tma_load(dst, map, c, bar, mask); }
static void saturn_tma_store(const void* map, uint32_t src, const int* c) {
  saturn_box((const TensorMap*)map, src, c, [&](unsigned char* g, uint32_t s, int size) { if (g) std::memcpy(g, saturn_smem + s, size); });
}
// a TMA store reads shared memory until a bulk wait: each thread's stores wait in its queue and
// read the staged tile there (or when the thread ends), so a tile written again too early is
// stored wrong here as on the GPU
struct saturn_store_op { const void* map; uint32_t src; int c[3]; };
static std::vector<saturn_store_op>* saturn_store_queue = nullptr;   // per fiber
static void saturn_stores_done() {
  for (const saturn_store_op& op : saturn_store_queue[saturn_current]) saturn_tma_store(op.map, op.src, op.c);
  saturn_store_queue[saturn_current].clear();
}
static void tma_store_2d(const void* map, uint32_t src, int x, int y) { saturn_store_queue[saturn_current].push_back({map, src, {x, y, 0}}); }
static void tma_store_3d(const void* map, uint32_t src, int x, int y, int z) { saturn_store_queue[saturn_current].push_back({map, src, {x, y, z}}); }
static void bulk_commit() {}
static void bulk_wait_read() { saturn_stores_done(); }
static void bulk_wait() { saturn_stores_done(); }
static void fence_proxy_async() {}
// a matrix descriptor's start address and leading / stride byte offsets (14 bits of 16 bytes)
static inline uint32_t saturn_desc_addr(uint64_t x) { return (uint32_t)(x & 0x3FFF) << 4; }
static inline uint32_t saturn_desc_lbo(uint64_t x) { return (uint32_t)((x >> 16) & 0x3FFF) << 4; }
static inline uint32_t saturn_desc_sbo(uint64_t x) { return (uint32_t)((x >> 32) & 0x3FFF) << 4; }
// the shared address of B's element (k, n) through its descriptor: k-contiguous, or with TB
// n-contiguous (read through the transpose bit); the 128-byte swizzle applied on reading
template <int TB> static inline uint32_t saturn_b_at(uint64_t db, uint32_t k, uint32_t n) {
  return TB ? saturn_desc_addr(db) + (n / 64) * saturn_desc_lbo(db) + (k / 8) * saturn_desc_sbo(db) + (k % 8) * 128 + (n % 64) * 2
            : saturn_desc_addr(db) + (n / 8) * saturn_desc_sbo(db) + (n % 8) * 128 + k * 2;
}
static inline float saturn_half_at(uint32_t a, float (*cv)(uint16_t)) {
  uint16_t v; std::memcpy(&v, saturn_smem + saturn_swizzle(a), 2); return cv(v); }
// wgmma is asynchronous: it reads its operands (shared memory; A's registers) until a
// wgmma.wait_group retires its group. Each thread's wgmmas wait in its queue (A's registers as
// issued) and run, in order, at the wg_wait that retires them, so a stage released or refilled
// before then gives wrong products here as on the GPU.
struct saturn_wgmma_op {
  void (*run)(const saturn_wgmma_op&);
  int group;                   // the thread's commits before it: its wgmma.commit_group
  float* d; uint64_t a, b; int one; float (*cv)(uint16_t);
  uint32_t words[32][4];       // (A in registers) the warp's fragments
};
static std::vector<saturn_wgmma_op>* saturn_wgmma_queue = nullptr;   // per fiber
static int* saturn_wgmma_groups = nullptr;                           // per fiber: commits so far
static void saturn_wgmma_issue(saturn_wgmma_op& op) {
  op.group = saturn_wgmma_groups[saturn_current];
  saturn_wgmma_queue[saturn_current].push_back(op);
}
static void wg_fence() {}
static void wg_commit() { saturn_wgmma_groups[saturn_current]++; }
// runs the queued wgmmas of every committed group but the newest N
template <int N> static void wg_wait() {
  saturn_retire(saturn_wgmma_queue[saturn_current], saturn_wgmma_groups[saturn_current] - N,
                [](const saturn_wgmma_op& op) { op.run(op); });
}
template <int N> static void wg_hold(float (&)[N]) {}
// d (this thread's part of a warpgroup's m64 x N accumulator: value j * 4 + 2 h + c is row
// warp * 16 + lane / 4 + 8 h, column j * 8 + 2 (lane % 4) + c) += A (64 x 16, K-major) B (16 x N)
template <int N, int TB> static void saturn_wgmma_run(const saturn_wgmma_op& op) {
  float* d = op.d;
  const unsigned t = saturn_current % 128, warp = t / 32, lane = t % 32;
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < N / 8; ++j)
      for (int c = 0; c < 2; ++c) {
        const uint32_t r = warp * 16 + lane / 4 + 8 * h, n = j * 8 + (lane % 4) * 2 + c;
        float s = op.one ? d[j * 4 + 2 * h + c] : 0.f;
        for (uint32_t k = 0; k < 16; ++k) {
          const uint32_t a = saturn_desc_addr(op.a) + (r / 8) * saturn_desc_sbo(op.a) + (r % 8) * 128 + k * 2;
          s += saturn_half_at(a, op.cv) * saturn_half_at(saturn_b_at<TB>(op.b, k, n), op.cv);
        }
        d[j * 4 + 2 * h + c] = s;
      }
}
template <int N, int TB> static void saturn_wgmma(float* d, uint64_t da, uint64_t db, int one, float (*cv)(uint16_t)) {
  saturn_wgmma_op op;
  op.run = saturn_wgmma_run<N, TB>; op.d = d; op.a = da; op.b = db; op.one = one; op.cv = cv;
  saturn_wgmma_issue(op);
}
#define SATURN_WGMMA(N, TY, TB) \
  static void wgmma_n##N##_##TY##_t##TB(float* d, uint64_t a, uint64_t b, int one) { saturn_wgmma<N, TB>(d, a, b, one, saturn_##TY); }
// the same with A (64 x 16) in the warpgroup's registers, B n-contiguous (transposed): lane l of
// warp w holds rows w * 16 + l / 4 (+ 8 in a[1], a[3]), columns 2 (l % 4) and + 1 (+ 8 in a[2],
// a[3]), two halves a register, the lower first; a warp's rows need only its own lanes
template <int N> static void saturn_wgmma_ra_run(const saturn_wgmma_op& op) {
  float* d = op.d;
  const unsigned lane = saturn_current & 31;
  auto av = [&](uint32_t r, uint32_t k) {
    const uint32_t w = op.words[(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)];
    return op.cv((uint16_t)(k % 2 ? w >> 16 : w & 0xFFFFu)); };
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < N / 8; ++j)
      for (int c = 0; c < 2; ++c) {
        const uint32_t r = lane / 4 + 8 * h, n = j * 8 + (lane % 4) * 2 + c;
        float s = op.one ? d[j * 4 + 2 * h + c] : 0.f;
        for (uint32_t k = 0; k < 16; ++k)
          s += av(r, k) * saturn_half_at(saturn_b_at<1>(op.b, k, n), op.cv);
        d[j * 4 + 2 * h + c] = s;
      }
}
template <int N> static void saturn_wgmma_ra(float* d, const uint32_t* a, uint64_t db, int one, float (*cv)(uint16_t)) {
  const unsigned me = saturn_current, lane = me & 31, base = me - lane;
  for (int i = 0; i < 4; ++i) saturn_words[me][i] = a[i];
  saturn_wait(SATURN_AT_WARP);
  saturn_wgmma_op op;
  op.run = saturn_wgmma_ra_run<N>; op.d = d; op.a = 0; op.b = db; op.one = one; op.cv = cv;
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) op.words[l][i] = saturn_words[base + l][i];
  saturn_wait(SATURN_AT_WARP);     // (no lane writes its words again before every lane has read)
  saturn_wgmma_issue(op);
}
#define SATURN_WGMMA_RA(N, TY) \
  static void wgmma_ra_n##N##_##TY(float* d, const uint32_t* a, uint64_t b, int one) { saturn_wgmma_ra<N>(d, a, b, one, saturn_##TY); }

// a thread that ends: its queued stores are stored; queued wgmmas would write registers it no longer has
static void saturn_thread_ends() {
  saturn_stores_done();
  saturn_wgmma_queue[saturn_current].clear();
  saturn_copies_land(1 << 30);
}

// Runs one block of `n` threads (a cluster of `cluster` blocks: together); 0, 1 where they
// deadlock (some wait at a barrier that the others never reach), 2 where they cannot start
// (more than 1024 a block, no context).
static int saturn_run_fibers(unsigned n, unsigned cluster) {
  if (n > 1024 || cluster > 2) return 2;
  saturn_block = n; saturn_cluster = cluster;
  n *= cluster;
  if (saturn_capacity < n) {
    for (unsigned i = 0; i < saturn_capacity; ++i) std::free(saturn_fibers[i].stack);
    std::free(saturn_fibers);
    saturn_fibers = (saturn_fiber*)std::calloc(n, sizeof(saturn_fiber));
    for (unsigned i = 0; i < n; ++i) saturn_fibers[i].stack = (char*)std::malloc(SATURN_STACK);
    delete[] saturn_wgmma_queue; delete[] saturn_wgmma_groups; delete[] saturn_store_queue;
    delete[] saturn_copy_queue; delete[] saturn_copy_groups;
    saturn_wgmma_queue = new std::vector<saturn_wgmma_op>[n];
    saturn_wgmma_groups = new int[n];
    saturn_store_queue = new std::vector<saturn_store_op>[n];
    saturn_copy_queue = new std::vector<saturn_copy_op>[n];
    saturn_copy_groups = new int[n];
    saturn_capacity = n;
  }
  for (unsigned i = 0; i < n; ++i) {
    saturn_wgmma_queue[i].clear(); saturn_wgmma_groups[i] = 0; saturn_store_queue[i].clear();
    saturn_copy_queue[i].clear(); saturn_copy_groups[i] = 0;
  }
  saturn_nthreads = n;
  std::memset(saturn_named_bars, 0, sizeof(saturn_named_bars));
  saturn_rank = 0;
  static ucontext_t saturn_context;          // (getcontext once: it is a system call)
  static bool saturn_have_context = getcontext(&saturn_context) == 0;
  if (!saturn_have_context) return 2;
  for (unsigned i = 0; i < n; ++i) {
    saturn_fiber& f = saturn_fibers[i];
    f.ctx = saturn_context;
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = SATURN_STACK;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, saturn_trampoline, 0);
    f.state = SATURN_RUNNING;
    f.started = false;
  }
  for (;;) {
    const unsigned long long before = saturn_progress;
    bool moved = false, polling = false;           // a fiber got past a poll / still polls
    for (unsigned i = 0; i < n; ++i) {
      if (saturn_fibers[i].state == SATURN_SPIN) saturn_fibers[i].state = SATURN_RUNNING;
      else if (saturn_fibers[i].state != SATURN_RUNNING) continue;
      saturn_current = i;
      saturn_rank = i / saturn_block;
      threadIdx.x = i % saturn_block;
      blockIdx.x = saturn_block_base + saturn_rank;
      saturn_fiber& f = saturn_fibers[i];
      if (!_setjmp(saturn_scheduler)) {
        if (f.started) _longjmp(f.resume, 1);
        f.started = true;
        setcontext(&f.ctx);
      }
      if (f.state == SATURN_SPIN) polling = true; else moved = true;
    }
    bool live = false, released = false;
    for (unsigned w = 0; w < n; w += 32) {      // warps whose live lanes all wait at a shuffle
      bool any = false, all = true;
      for (unsigned i = w; i < n && i < w + 32; ++i) {
        saturn_state s = saturn_fibers[i].state;
        if (s == SATURN_DONE) continue;
        any = live = true;
        all = all && s == SATURN_AT_WARP;
      }
      if (any && all) {
        released = true;
        for (unsigned i = w; i < n && i < w + 32; ++i)
          if (saturn_fibers[i].state == SATURN_AT_WARP) saturn_fibers[i].state = SATURN_RUNNING;
      }
    }
    if (!live) return 0;
    for (unsigned r = 0; r < saturn_cluster; ++r) {   // blocks whose live threads all wait at the barrier
      bool any = false, all = true;
      for (unsigned i = r * saturn_block; i < (r + 1) * saturn_block; ++i) {
        saturn_state s = saturn_fibers[i].state;
        if (s == SATURN_DONE) continue;
        any = true;
        all = all && s == SATURN_AT_BARRIER;
      }
      if (any && all) {
        released = true;
        for (unsigned i = r * saturn_block; i < (r + 1) * saturn_block; ++i)
          if (saturn_fibers[i].state == SATURN_AT_BARRIER) saturn_fibers[i].state = SATURN_RUNNING;
      }
    }
    if (released) continue;
    if (polling && (moved || saturn_progress != before)) continue;
    return 1;       // threads wait at a barrier or shuffle the others never reach, or poll in vain
  }
}
static int saturn_run_block(unsigned n, unsigned cluster = 1) {
  saturn_fibered = true;
  const int r = saturn_run_fibers(n, cluster);
  saturn_fibered = false;
  return r;
}
"""

HOST_PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>
#include <cstring>
struct saturn_dim3 { unsigned x, y, z; };
static saturn_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __launch_bounds__(...)
#define DEV static inline
static inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
// the device's round-toward-zero conversions as the H200 gives them: saturating; NaN is 0 from
// f32 to i32, the most negative integer otherwise (the prelude's to_i32 / to_i64 test for NaN)
static inline long long saturn_sat(double x, double lo, double hi) {
    return x <= lo ? (long long)lo : x >= hi ? (long long)hi : (long long)std::trunc(x); }
static inline int __float2int_rz(float x) { return x != x ? 0 : (int)saturn_sat(x, -2147483648.0, 2147483647.0); }
static inline int __double2int_rz(double x) { return x != x ? INT32_MIN : (int)saturn_sat(x, -2147483648.0, 2147483647.0); }
static inline long long saturn_sat64(double x) {
    return x != x ? INT64_MIN : x >= 9223372036854775807.0 ? INT64_MAX : x <= -9223372036854775808.0 ? INT64_MIN : (long long)x; }
static inline long long __float2ll_rz(float x) { return saturn_sat64(x); }
static inline long long __double2ll_rz(double x) { return saturn_sat64(x); }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
""" + THREADS + REDUCTIONS + FLOAT_TO_INT


def wgmma_helpers(body: str) -> str:
    """The host's definition of each wgmma helper `body` calls (any width N), and the guard that
    keeps out its device definition."""
    out = [f"SATURN_WGMMA({n}, {ty}, {tb})\n#define SATURN_WGMMA_N{n}_{ty}_T{tb}\n"
           for n, ty, tb in sorted(set(re.findall(r"\bwgmma_n(\d+)_(f16|bf16)_t([01])\b", body)))]
    out += [f"SATURN_WGMMA_RA({n}, {ty})\n#define SATURN_WGMMA_RA_N{n}_{ty}\n"
            for n, ty in sorted(set(re.findall(r"\bwgmma_ra_n(\d+)_(f16|bf16)\b", body)))]
    return "".join(out)


def cuda_include() -> str | None:
    for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if d and os.path.exists(os.path.join(d, "include", "cuda_fp16.h")):
            return os.path.join(d, "include")
    return None


def available() -> str | None:
    """None when kernels can be run on the host here, else what is missing."""
    if shutil.which("g++") is None:
        return "no g++"
    if cuda_include() is None:
        return "no CUDA headers (cuda_fp16.h)"
    return None


def _strip_prelude(src: str) -> str:
    # the device prelude (inline PTX) is not needed by these kernels; cut it out
    start = src.find("#include <cuda_fp16.h>")
    if start < 0:
        return src
    # (up to the first step: a step's own helpers, e.g. a product's epilogue, come before its kernel)
    end = src.find("\n// step ", start)
    end = src.find("extern \"C\"", start) if end < 0 else end
    return src[:start] + (src[end:] if end > 0 else "")     # (no kernel at all: a program of views)


THREAD_MARKERS = ("__syncthreads", "__shared__", "_sync(", "block_sum", "block_max", "warp_sum", "warp_max")


def _kernel_text(body: str, name: str) -> str:
    """The text of kernel `name` in `body`: from its declaration (qualifiers such as its
    cluster size included) to the next kernel's."""
    at = body.find(f" {name}(")
    if at < 0:
        return ""
    end = body.find('extern "C"', at)
    return body[max(body.rfind('extern "C"', 0, at), 0):end if end > 0 else len(body)]


def _flags() -> list[str]:
    return ["-O1", "-std=c++17", "-U_FORTIFY_SOURCE", "-fPIC", "-w", f"-I{cuda_include()}"]


_prelude_dir: str | None = None
_prelude_lock = threading.Lock()


def _prelude() -> str:
    """A directory holding HOST_PRELUDE as a header, precompiled once a process (the prelude and
    CUDA's half-precision headers are most of a kernel's host compile). Where the precompiled
    header cannot be made or used, the compiler reads the header's text: slower, the same result."""
    global _prelude_dir
    with _prelude_lock:
        if _prelude_dir is None or not os.path.exists(os.path.join(_prelude_dir, "saturn_host.h")):
            d = tempfile.mkdtemp(prefix="saturn_host_prelude_")
            owner = os.getpid()     # (a forked child that exits leaves it to this process)
            atexit.register(lambda: os.getpid() == owner and shutil.rmtree(d, True))
            header = os.path.join(d, "saturn_host.h")
            with open(header, "w") as f:
                f.write(HOST_PRELUDE)
            subprocess.run(["g++", *_flags(), "-x", "c++-header", header, "-o", header + ".gch"], capture_output=True)
            _prelude_dir = d
    return _prelude_dir


def _compile(code: str) -> ctypes.CDLL:
    """Compile HOST_PRELUDE (precompiled) and then `code` with the host compiler and load it;
    its files are removed once loaded (the loaded library stays mapped), so runs leave nothing
    behind."""
    key = hashlib.sha256(code.encode()).hexdigest()[:24]
    tmp = tempfile.mkdtemp(prefix="saturn_host_")
    try:
        so = os.path.join(tmp, f"k{key}.so")
        cpp = os.path.join(tmp, "k.cpp")
        with open(cpp, "w") as f:
            f.write('#include "saturn_host.h"\n' + code)
        proc = subprocess.run(["g++", *_flags(), f"-I{_prelude()}", "-shared", cpp, "-o", so],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"host compile failed:\n{proc.stderr[:3000]}")
        return ctypes.CDLL(so)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build(source: str, kernels: list[tuple[str, int, int | tuple[int, int, int], int]]):
    """Compile `source` (kernels as rendered) for the host. kernels: (name, n_params, grid,
    block[, n_maps]), grid a block count or (x, y, z); a kernel with tensor maps takes that many
    first (`host_map` arrays, before its pointers' arrays). A kernel that syncs or shares memory
    runs its block's threads as fibers (THREADS), others thread by thread. Returns a function
    run(name, arrays) that runs one launch."""
    body = _strip_prelude(source)
    wrappers, seen = [], {}
    for name, nparams, grid, block, *maps in kernels:
        nmaps = maps[0] if maps else 0
        grid = (grid, 1, 1) if isinstance(grid, int) else tuple(grid)
        if name in seen:    # one kernel launched again (a generic kernel reused): one wrapper
            if seen[name] != (nparams, grid, block):
                raise ValueError(f"kernel {name} launched with two shapes: {seen[name]}, {(nparams, grid, block)}")
            continue
        seen[name] = (nparams, grid, block)
        # tensor maps by value first (as the kernel takes them), then the pointers
        sig = ", ".join(["TensorMap"] * nmaps + ["void*"] * nparams)
        args = ", ".join([f"*(const TensorMap*)a[{i}]" for i in range(nmaps)]
                         + [f"a[{nmaps + i}]" for i in range(nparams)])
        call = f"((void (*)({sig})){name})({args});"
        loops = (f"  blockDim.x = {block}u; blockDim.y = blockDim.z = 1u;\n"
                 f"  gridDim.x = {grid[0]}u; gridDim.y = {grid[1]}u; gridDim.z = {grid[2]}u;\n"
                 f"  for (unsigned z = 0; z < {grid[2]}u; ++z) for (unsigned y = 0; y < {grid[1]}u; ++y)\n"
                 f"  for (unsigned x = 0; x < {grid[0]}u; ++x) {{\n"
                 f"    blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;\n")
        text = _kernel_text(body, name)
        dims = re.search(r"__cluster_dims__\((\d+)", text)
        cluster = int(dims.group(1)) if dims else 1
        if cluster > 1:     # the blocks of a cluster run together, x = its first block
            if grid[0] % cluster:
                raise ValueError(f"kernel {name}: grid {grid} is not made of clusters of {cluster}")
            loops = loops.replace(f"for (unsigned x = 0; x < {grid[0]}u; ++x)", f"for (unsigned x = 0; x < {grid[0]}u; x += {cluster}u)")
        if any(m in text for m in THREAD_MARKERS):
            wrappers.append(
                f"static void** saturn_args_{name};\n"
                f"static void saturn_body_{name}() {{ void** a = saturn_args_{name}; {call} }}\n"
                f'extern "C" int saturn_run_{name}(void** a) {{\n'
                f"  saturn_args_{name} = a; saturn_body = saturn_body_{name};\n{loops}"
                f"    saturn_block_base = x;\n"
                f"    if (int r = saturn_run_block({block}u, {cluster}u)) return r;\n  }}\n  return 0;\n}}\n")
        else:
            wrappers.append(
                f'extern "C" int saturn_run_{name}(void** a) {{\n{loops}'
                f"    for (unsigned t = 0; t < {block}u; ++t) {{ threadIdx.x = t; {call} }}\n  }}\n  return 0;\n}}\n")
    # dynamic shared memory: the host's arena (blocks run one after another)
    body = re.sub(r"extern __shared__ __align__\(\d+\) unsigned char (\w+)\[\];", r"unsigned char* \1 = saturn_smem;", body)
    lib = _compile(wgmma_helpers(body) + body + "\n" + "\n".join(wrappers))

    def run(name: str, arrays: list[np.ndarray]) -> None:
        ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        failed = getattr(lib, f"saturn_run_{name}")(ptrs)
        if failed == 1:
            raise RuntimeError(f"kernel {name}: the threads of a block wait at barriers that the others never reach")
        if failed:
            raise RuntimeError(f"kernel {name}: a block of {seen[name][2]} threads cannot run here (at most 1024)")
    return run


def unwritten(n: int, dtype) -> np.ndarray:
    """A buffer of n elements before any kernel writes it: every byte 0xFF (NaN for floats, -1
    for integers), as a device buffer is filled, so an element a kernel leaves unwritten shows."""
    return np.full(n * np.dtype(dtype).itemsize, 0xFF, np.uint8).view(dtype)


def run_kernel_ir(graph, args, row_threads: int = 0) -> list[np.ndarray]:
    """Lower `graph` with ir.lower, render it with the CUDA kernel-IR renderer (row_threads:
    threads that share a row's reductions through shuffles, 0 for a thread per row), run it here."""
    from ir.lower import lower
    from backends.cuda.kir import render_kir_program
    program = lower(graph)
    src, launches = render_kir_program(program, row_threads=row_threads)
    run = build(src, [(l.name, len(l.buffers), l.grid, l.block[0]) for l in launches])
    bufs = {}
    for b in program.buffers:
        bufs[b.name] = unwritten(max(b.size, 1), b.dtype.np)
    for name, a in zip(program.inputs, args):
        bufs[name][: np.size(a)] = np.ascontiguousarray(a, dtype=program.buffer(name).dtype.np).reshape(-1)
    for l in launches:
        run(l.name, [bufs[b] for b in l.buffers])
    return [bufs[name][: int(np.prod(shape))].reshape(shape).copy()
            for name, shape in zip(program.outputs, program.output_shapes)]


# kinds whose kernels run over THREADS (stage: an elementwise copy; gemm_tc and the mma.sync
# flash attention: cp.async, ldmatrix, mma.sync and ex2 emulated; Hopper's products: wgmma,
# TMA copies and stores, mbarriers, named barriers and clusters of two blocks emulated; the wgmma
# flash attention: wgmma with A in registers too)
EMULATED_KINDS = ("elementwise", "generic", "stage", "row", "gemm_simt", "gemm_tc", "attention", "gemm_wgmma",
                  "gemm_tma", "transpose")


def host_map(m, buffer: np.ndarray) -> np.ndarray:
    """The host's tensor map (THREADS' TensorMap) of `m` (tensor_map.TensorMap) over `buffer`:
    base address, rank, element size, dims, byte strides of the outer dims, box."""
    size = m.dtype.itemsize
    bits = np.zeros(16, np.uint64)
    bits[0] = buffer.ctypes.data + m.offset * size
    bits[1], bits[2] = len(m.dims), size
    bits[3:3 + len(m.dims)] = m.dims
    bits[6:6 + len(m.strides)] = [st * size for st in m.strides]
    bits[8:8 + len(m.box)] = m.box
    return bits


def run_templates(graph, args, schedule=None) -> list[np.ndarray]:
    """Render `graph` with the template planner (under `schedule`) and run it here; every step
    must be of EMULATED_KINDS or a cuBLAS call: one into the step's output is stood in for by
    the interpreter's value (the product where an epilogue kernel finishes the step, else the
    step's value), one into a buffer of its own is emulated from its arguments
    (`cublas.emulate_call`)."""
    from backends.cuda import render
    from backends.cuda.plan import plan, prepare
    from ir.interpreter import evaluate_nodes
    src, launches = render(graph, schedule)
    products = {s.store or s.output: s.gemm.reduce for s in plan(graph) if s.gemm is not None}
    graph = prepare(graph)[0]       # (the launches name its nodes)
    kinds = {l.kind for l in launches}
    if not kinds <= set(EMULATED_KINDS) | {"cublas"}:
        raise ValueError(f"kernels of kinds {sorted(kinds - set(EMULATED_KINDS))} need a GPU")
    kernels = [l for l in launches if l.library is None]
    finished = {l.output for l in launches if l.name.endswith("_epilogue")}
    run = build(src, [(l.name, 1 + len(l.inputs), l.grid, l.block[0], len(l.tensor_maps)) for l in kernels])
    bufs = {}
    for node, a in zip(graph.inputs, args):
        bufs[node] = np.ascontiguousarray(a, dtype=node.dtype.np).reshape(-1).copy()
    for l in launches:
        if l.output not in bufs:
            bufs[l.output] = unwritten(max(l.output.numel, 1), l.output.dtype.np)
        if l.library is not None and l.output in products:
            # the interpreter's value into the output: the product where an epilogue kernel
            # finishes the step in place, else the step's own value (a scale, a cast)
            env = {n: bufs[n][: n.numel].reshape(n.shape) for n in graph.inputs}
            value = products[l.output] if l.output in finished else l.output
            bufs[l.output][: l.output.numel] = evaluate_nodes([value], env)[0].reshape(-1)
        elif l.library is not None:    # into a buffer of its own: the call itself, emulated
            from backends.cuda.cublas import emulate_call
            emulate_call(l.library, [bufs[l.output]] + [bufs[n] for n in l.inputs])
        else:
            for n in l.inputs:     # an empty value has no kernel but a buffer, as on the device
                if n not in bufs:
                    bufs[n] = unwritten(max(n.numel, 1), n.dtype.np)
            pointers = [bufs[l.output]] + [bufs[n] for n in l.inputs]
            run(l.name, [host_map(m, pointers[m.arg]) for m in l.tensor_maps] + pointers)
    return [np.zeros(o.shape, o.dtype.np) if o.numel == 0 else bufs[o][: o.numel].reshape(o.shape).copy()
            for o in graph.outputs]      # (an empty output has no kernel)
