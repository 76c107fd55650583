"""Helpers every translation unit starts with: types, cp.async, ldmatrix, mma, warp reductions."""

# float -> integer, round toward zero, saturating, NaN -> 0 (ir.interpreter.float_to_int): the rz
# intrinsics saturate, but NaN gives INT_MIN from a double (and to 64 bits), 0 only f32 -> i32.
# Also in the host simulator's prelude (backends/cuda/hostsim.py), over its emulated intrinsics.
FLOAT_TO_INT = r"""
DEV int to_i32(float x) { return x != x ? 0 : __float2int_rz(x); }
DEV int to_i32(double x) { return x != x ? 0 : __double2int_rz(x); }
DEV long long to_i64(float x) { return x != x ? 0 : __float2ll_rz(x); }
DEV long long to_i64(double x) { return x != x ? 0 : __double2ll_rz(x); }
"""

# NaN-propagating max and the warp / block reductions: in the device prelude, and in the host
# simulator's (backends/cuda/hostsim.py) over its emulated warp shuffles and barriers.
REDUCTIONS = r"""
// NaN-propagating max, like numpy's
DEV float max_nan(float a, float b) { return (a != a) ? a : ((b != b || b > a) ? b : a); }
DEV int max_nan(int a, int b) { return a > b ? a : b; }

// over the 32 lanes of a warp (float or int)
template <class T> DEV T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T> DEV T warp_max(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// block-wide reductions (blockDim.x a multiple of 32); every thread gets warp 0's lane-0 result,
// so the value does not depend on which thread reads it. sh: 33 floats of shared memory.
template <bool MAX> DEV float block_reduce(float v, float* sh) {
  v = MAX ? warp_max(v) : warp_sum(v);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    v = l < (int)(blockDim.x >> 5) ? sh[l] : (MAX ? -__int_as_float(0x7f800000) : 0.f);
    v = MAX ? warp_max(v) : warp_sum(v);
    if (l == 0) sh[32] = v;
  }
  __syncthreads();
  return sh[32];
}
DEV float block_sum(float v, float* sh) { return block_reduce<false>(v, sh); }
DEV float block_max(float v, float* sh) { return block_reduce<true>(v, sh); }
"""

PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#define DEV __device__ __forceinline__

DEV uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 2^x as one MUFU.EX2 (exp2f adds a range test and two multiplies to keep subnormal results):
// the attention kernels' probabilities, where a result below 2^-126 counts as 0
DEV float ex2_ftz(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }

// 16-byte global->shared copy; src_bytes = 0 fills the destination with zeros (bounds).
DEV void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes));
}
// 4-byte global->shared copy (an f32 element), through the L1 (.ca: neighbours share lines);
// src_bytes = 0 writes a zero
DEV void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> DEV void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

DEV void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
DEV void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// D += A(16x16, row) * B(16x8, col), f32 accumulation
DEV void mma_f16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
DEV void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

DEV uint32_t pack_f16(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
DEV uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

""" + REDUCTIONS + FLOAT_TO_INT
