// A second translation unit, so a library can hold two bundles (tests/hipbuild.py).
#include "hip_min.h"

extern "C" __global__ void saxpy(float *y, const float *x, float a, int n) {
  int i = block_x() * 256 + thread_x();
  if (i < n) y[i] = a * x[i] + y[i];
}
