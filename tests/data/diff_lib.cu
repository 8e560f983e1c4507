// Two builds of one library for the diff and gate tests (tests/test_diff.py). -DV2 gives `regs`
// more live values (more registers, no spills), caps `spiller` at 32 registers with
// __launch_bounds__ (it spills), renames `renamed_v1`, adds scale<double>; the test builds v2
// without sm_80. `stable` and scale<float> do not change.
#ifdef V2
#define REGS_LIVE 24
#define SPILL_BOUND __launch_bounds__(1024, 2)
#define RENAMED renamed_v2
#else
#define REGS_LIVE 12
#define SPILL_BOUND
#define RENAMED renamed_v1
#endif

template <int N>
__device__ __forceinline__ float mix(const float *in, int n) {
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; i++) acc[i] = in[threadIdx.x + i * n];
#pragma unroll
  for (int j = 0; j < 4; j++)
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = acc[i] * acc[(i * 7 + j) % N] + in[i + j];
  float s = 0;
#pragma unroll
  for (int i = 0; i < N; i++) s += acc[i] * (i + 1);
  return s;
}

extern "C" __global__ void regs(float *out, const float *in, int n) {
  out[threadIdx.x] = mix<REGS_LIVE>(in, n);
}

extern "C" __global__ void SPILL_BOUND spiller(float *out, const float *in, int n) {
  out[threadIdx.x] = mix<48>(in, n);
}

extern "C" __global__ void stable(float *out, const float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f + 1.0f;
}

extern "C" __global__ void RENAMED(float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 0.0f;
}

template <typename T>
__global__ void scale(T *x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
template __global__ void scale<float>(float *, float, int);
#ifdef V2
template __global__ void scale<double>(double *, double, int);
#endif
