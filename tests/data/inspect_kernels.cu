// Kernels for the cubin/PTX inspection tests (tests/cudabuild.py builds them for many archs).
// They cover: parameters of many sizes and alignments, static and dynamic shared memory, a stack
// frame and local arrays, a noinline device function, module constant memory, launch bounds and
// a register cap, template instantiations and a kernel without parameters.
#include <cstdint>

__constant__ float c_table[64];
__constant__ int c_small[7];
__device__ int g_counter;

__device__ __noinline__ float helper(float x, int n) {
    float loc[32];
    for (int i = 0; i < 32; ++i) loc[i] = x * i + n;
    return loc[n & 31] + c_table[n & 63];
}

struct Big { double d[5]; char c; };
struct Huge { int v[100]; };

extern "C" __global__ void k_simple(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = helper(in[i], i) + c_small[i % 7];
}

extern "C" __global__ void __launch_bounds__(256, 2)
k_params(float* out, char c, short s, double d, Big b, float2 f2, long long ll, unsigned char u8) {
    __shared__ float tile[512];
    tile[threadIdx.x] = c + s + d + b.d[threadIdx.x % 5] + b.c + f2.x + f2.y + ll + u8;
    __syncthreads();
    out[threadIdx.x] = tile[(threadIdx.x + 1) % 512];
}

extern "C" __global__ void k_huge_param(Huge h, int* out) {
    out[threadIdx.x] = h.v[threadIdx.x % 100];
    atomicAdd(&g_counter, 1);
}

extern "C" __global__ void k_dynamic_shared(float* out) {
    extern __shared__ float dyn[];
    volatile float arr[100];
    for (int i = 0; i < 100; ++i) arr[i] = i * out[i];
    dyn[threadIdx.x] = arr[threadIdx.x % 100];
    out[threadIdx.x] = dyn[threadIdx.x ^ 1];
}

extern "C" __global__ void __maxnreg__(40) k_maxnreg(double* p, int n) {
    double acc = 0;
    for (int i = 0; i < n; ++i) acc += p[i] * p[n - i];
    p[threadIdx.x] = acc;
}

template <typename T> __global__ void k_tmpl(T* p) { p[threadIdx.x] += T(1); }
template __global__ void k_tmpl<int>(int*);
template __global__ void k_tmpl<double>(double*);

extern "C" __global__ void k_noparams() {}
