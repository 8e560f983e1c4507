// Kernels for the LLD-linked library (tests/test_slim_lld.py, tests/gpu/test_lld_gpu.py): several
// kernels in one module, run in a chain by an exported host function whose results are known.
#include <cuda_runtime.h>

__global__ void lld_iota(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = static_cast<float>(i);
}

__global__ void lld_axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void lld_square(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * y[i];
}

__global__ void lld_sum(const float* y, int n, float* total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(total, y[i]);
}

// host side only: what the CPU tests call after dlopen
extern "C" int lld_answer() { return 42; }

// y = ((a + 1) * i)^2 into host[0..n), their sum into *total: 0 on success, else the CUDA error
extern "C" int lld_run(int n, float a, float* host, float* total) {
    float *x = nullptr, *y = nullptr, *sum = nullptr;
    cudaError_t err = cudaMalloc(&x, n * sizeof(float));
    if (err == cudaSuccess) err = cudaMalloc(&y, n * sizeof(float));
    if (err == cudaSuccess) err = cudaMalloc(&sum, sizeof(float));
    if (err == cudaSuccess) err = cudaMemset(sum, 0, sizeof(float));
    int blocks = (n + 127) / 128;
    if (err == cudaSuccess) {
        lld_iota<<<blocks, 128>>>(x, n);
        lld_iota<<<blocks, 128>>>(y, n);
        lld_axpy<<<blocks, 128>>>(y, x, a, n);
        lld_square<<<blocks, 128>>>(y, n);
        lld_sum<<<blocks, 128>>>(y, n, sum);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess) err = cudaMemcpy(host, y, n * sizeof(float), cudaMemcpyDeviceToHost);
    if (err == cudaSuccess) err = cudaMemcpy(total, sum, sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(x);
    cudaFree(y);
    cudaFree(sum);
    return static_cast<int>(err);
}
