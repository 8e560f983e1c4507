// The least a HIP translation unit needs when clang compiles it with -nogpulib -nogpuinc (no
// ROCm headers or device libraries): the attributes behind __global__/__shared__ and the three
// runtime functions clang's host-side kernel stubs call (clang/lib/CodeGen/CGCUDANV.cpp).
#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))

struct dim3 {
  unsigned x, y, z;
};
extern "C" int hipLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                               unsigned long shared_bytes, void *stream);
extern "C" unsigned __hipPushCallConfiguration(dim3 grid, dim3 block, unsigned long shared_bytes,
                                               void *stream);
extern "C" unsigned __hipPopCallConfiguration(dim3 *grid, dim3 *block,
                                              unsigned long *shared_bytes, void *stream);

__device__ static inline int thread_x() { return __builtin_amdgcn_workitem_id_x(); }
__device__ static inline int block_x() { return __builtin_amdgcn_workgroup_id_x(); }
