// Kernels for the HIP fixtures (tests/hipbuild.py): one per resource the oracles report.
#include "hip_min.h"

// The plain case: no LDS, no scratch.
extern "C" __global__ void add(float *a, const float *b, int n) {
  int i = block_x() * 256 + thread_x();
  if (i < n) a[i] += b[i];
}

// Static LDS: 256 floats = 1024 bytes (.group_segment_fixed_size).
extern "C" __global__ __launch_bounds__(256) void lds_reverse(float *a) {
  __shared__ float tile[256];
  int t = thread_x();
  tile[t] = a[block_x() * 256 + t];
  __builtin_amdgcn_s_barrier();
  a[block_x() * 256 + t] = tile[255 - t];
}

// Scratch: a private array indexed by a runtime value stays in memory
// (.private_segment_fixed_size > 0).
extern "C" __global__ void scratch(int *out, const int *idx) {
  int buf[64];
  int t = thread_x();
  for (int k = 0; k < 64; ++k) buf[k] = k * t + idx[k];
  out[t] = buf[idx[t] & 63];
}

// Register pressure under a VGPR cap: 64 live values with at most 16 VGPRs spill
// (.vgpr_spill_count > 0).
extern "C" __global__ __attribute__((amdgpu_num_vgpr(16))) void spill(float *a) {
  float v[64];
  int t = thread_x();
#pragma unroll
  for (int k = 0; k < 64; ++k) v[k] = a[t + 64 * k];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 64; ++k) s += v[k] * v[63 - k];
#pragma unroll
  for (int k = 0; k < 64; ++k) a[t + 64 * k] = v[k] + s;
}

// A C++ name: namespace and template, mangled as _ZN3fbk5scaleIfEEvPT_S1_i.
namespace fbk {
template <typename T> __global__ void scale(T *a, T factor, int n) {
  int i = block_x() * 256 + thread_x();
  if (i < n) a[i] *= factor;
}
template __global__ void scale<float>(float *, float, int);
}  // namespace fbk
