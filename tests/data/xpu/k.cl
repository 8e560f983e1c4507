// Test kernels for ocloc (tests/xpubuild.py): two kernels, one with local memory.
kernel void add(global float *a, global const float *b, int n) {
    int i = get_global_id(0);
    if (i < n) a[i] += b[i];
}

kernel void lds_reverse(global float *a) {
    local float tile[256];
    int i = get_local_id(0);
    tile[i] = a[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    a[get_global_id(0)] = tile[255 - i];
}
