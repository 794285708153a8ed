// "Blocking for the cache" on a GPU (the kernellab demo paper): an n x n float transpose, naive and tiled.
//   transpose_cuda naive N    each thread moves one element: reads coalesce, writes stride by N floats
//   transpose_cuda tiled N    a 32 x 32 tile staged in shared memory (padded against bank conflicts):
//                             reads and writes both coalesce
// Prints the median GPU time of its timed runs (CUDA events) and how many elements are wrong.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

extern "C" {
#include "minibench.h"
}

#define TILE 32
#define ROWS 8
#define RUNS 21

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t e = (call);                                                          \
    if (e != cudaSuccess) {                                                          \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));     \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

__global__ void naive(const float *src, float *dst, int n) {
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  for (int k = 0; k < TILE; k += ROWS)
    if (x < n && y + k < n) dst[(long)x * n + y + k] = src[(long)(y + k) * n + x];
}

__global__ void tiled(const float *src, float *dst, int n) {
  __shared__ float tile[TILE][TILE + 1];
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  for (int k = 0; k < TILE; k += ROWS)
    if (x < n && y + k < n) tile[threadIdx.y + k][threadIdx.x] = src[(long)(y + k) * n + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  for (int k = 0; k < TILE; k += ROWS)
    if (x < n && y + k < n) dst[(long)(y + k) * n + x] = tile[threadIdx.x][threadIdx.y + k];
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "naive") && strcmp(argv[1], "tiled"))) {
    fprintf(stderr, "usage: %s naive|tiled N\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[2]);
  if (n <= 0) {
    fprintf(stderr, "N must be positive\n");
    return 2;
  }
  size_t bytes = sizeof(float) * n * n;
  float *src = (float *)malloc(bytes), *dst = (float *)malloc(bytes), *d_src, *d_dst;
  for (long k = 0; k < (long)n * n; k++) src[k] = (float)(k % 1000003);
  CHECK(cudaMalloc(&d_src, bytes));
  CHECK(cudaMalloc(&d_dst, bytes));
  CHECK(cudaMemcpy(d_src, src, bytes, cudaMemcpyHostToDevice));
  dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE), threads(TILE, ROWS);
  bool is_tiled = !strcmp(argv[1], "tiled");
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  double ms[RUNS];
  for (int r = -1; r < RUNS; r++) {  // run -1 warms up
    CHECK(cudaMemset(d_dst, 0, bytes));
    CHECK(cudaEventRecord(start));
    if (is_tiled)
      tiled<<<grid, threads>>>(d_src, d_dst, n);
    else
      naive<<<grid, threads>>>(d_src, d_dst, n);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaGetLastError());
    float t;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    if (r >= 0) ms[r] = t;
  }
  CHECK(cudaMemcpy(dst, d_dst, bytes, cudaMemcpyDeviceToHost));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  double median = mb_median(ms, RUNS);
  printf("%s n=%d on %s\n", argv[1], n, prop.name);
  printf("mismatches: %ld\n", mb_transpose_mismatches(src, dst, n));
  printf("time: %.4f ms\n", median);
  printf("bandwidth: %.2f GB/s\n", 2.0 * bytes / (median * 1e6));
  CHECK(cudaFree(d_src));
  CHECK(cudaFree(d_dst));
  free(src);
  free(dst);
  return 0;
}
