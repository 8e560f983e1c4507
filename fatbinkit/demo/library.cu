// The demo's CUDA library, which fatbinkit demo and the slimming tests prune: kernels for several
// GPU archs, host code whose results are known, and C++ exceptions thrown inside the library
// (caught there, and caught by the program that links it), so a rewrite that broke the unwind
// tables or the data shows.
#include <cuda_runtime.h>
#include <stdexcept>
#include <string>

// 64 KiB of initialised device data in every cubin: pruning an arch frees whole pages
__device__ unsigned char slim_blob[1 << 16] = {1, 2, 3};

__global__ void slim_fill(float* out, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * i + 1.0f + (slim_blob[(i * 7) & 0xffff] == 255 ? 1.0f : 0.0f);
}

static const char kTable[] = "fatbinkit slim test table";

extern "C" int slim_version() { return 42; }

extern "C" int slim_table_sum() {
    int s = 0;
    for (const char* p = kTable; *p; ++p) s += *p;
    return s;
}

// thrown and caught inside the library
extern "C" int slim_catch_inside(int v) {
    try {
        if (v > 0) throw std::runtime_error("inside " + std::to_string(v));
        return -1;
    } catch (const std::runtime_error& e) {
        return static_cast<int>(std::string(e.what()).size()) + v;
    }
}

// thrown here, caught by the caller in another object
void slim_throw(int v) { throw std::out_of_range("from the library " + std::to_string(v)); }

// fills out[0..n) on the GPU: 0 on success, else the CUDA error code
extern "C" int slim_run(float* host, int n, float a) {
    float* dev = nullptr;
    cudaError_t err = cudaMalloc(&dev, n * sizeof(float));
    if (err != cudaSuccess) return static_cast<int>(err);
    slim_fill<<<(n + 127) / 128, 128>>>(dev, n, a);
    err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    return static_cast<int>(err);
}
