// Register spills for tests/test_cubin.py, built with -maxrregcount=24 and checked against
// ptxas -v: 32-bit, 64-bit and float4 values kept live past the register budget, a local array
// indexed at run time (STL/LDL that are not spills), and a kernel that does not spill.
#define N 48

extern "C" __global__ void k_spill32(const float* __restrict__ in, float* out, int n) {
    float a[N];
#pragma unroll
    for (int i = 0; i < N; i++) a[i] = in[threadIdx.x + i * n];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 3; j++) {
#pragma unroll
        for (int i = 0; i < N; i++) { a[i] = a[i] * a[(i + j + 1) % N] + s; s += a[i]; }
    }
#pragma unroll
    for (int i = 0; i < N; i++) out[threadIdx.x + i * n] = a[i];
}

extern "C" __global__ void k_spill64(const double* __restrict__ in, double* out, int n) {
    double a[N];
#pragma unroll
    for (int i = 0; i < N; i++) a[i] = in[threadIdx.x + i * n];
    double s = 0.;
#pragma unroll
    for (int j = 0; j < 3; j++) {
#pragma unroll
        for (int i = 0; i < N; i++) { a[i] = a[i] * a[(i + j + 1) % N] + s; s += a[i]; }
    }
#pragma unroll
    for (int i = 0; i < N; i++) out[threadIdx.x + i * n] = a[i];
}

extern "C" __global__ void k_spill_float4(const float4* __restrict__ in, float4* out,
                                          const float* __restrict__ w, int n) {
    float4 a[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) a[i] = in[threadIdx.x + i * n];
    float s = 0.f;
#pragma unroll 1
    for (int j = 0; j < n; j++) s = s * w[j] + w[j + 1];
#pragma unroll
    for (int i = 0; i < N / 2; i++)
        out[threadIdx.x + i * n] = make_float4(a[i].x + s, a[i].y, a[i].z, a[i].w);
}

extern "C" __global__ void k_local_array(const int* idx, float* out, int n) {
    float a[64];
    for (int i = 0; i < 64; i++) a[i] = out[i * n + threadIdx.x];
    for (int i = 0; i < n; i++) a[idx[i] & 63] += 1.0f;
    out[threadIdx.x] = a[idx[threadIdx.x] & 63];
}

extern "C" __global__ void k_no_spill(const float* in, float* out) {
    out[threadIdx.x] = in[threadIdx.x] * 2.f;
}
