/* "Blocking for the cache" (the kernellab demo paper): an n x n float transpose, naive and cache-blocked.
 *   transpose naive N        one pass over rows: the writes stride through memory by N floats
 *   transpose blocked N B    B x B tiles, each read and written while it is in cache
 * Prints the median of its timed runs and how many elements are wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minibench.h"

#ifndef RUNS
#define RUNS 7
#endif

static void naive(const float *src, float *dst, int n, int block) {
  (void)block;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      dst[(long)j * n + i] = src[(long)i * n + j];
}

static void blocked(const float *src, float *dst, int n, int block) {
  for (int ii = 0; ii < n; ii += block)
    for (int jj = 0; jj < n; jj += block)
      for (int i = ii; i < ii + block && i < n; i++)
        for (int j = jj; j < jj + block && j < n; j++)
          dst[(long)j * n + i] = src[(long)i * n + j];
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "naive") && strcmp(argv[1], "blocked"))) {
    fprintf(stderr, "usage: %s naive|blocked N [BLOCK]\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[2]), block = argc > 3 ? atoi(argv[3]) : 32;
  if (n <= 0 || block <= 0) {
    fprintf(stderr, "N and BLOCK must be positive\n");
    return 2;
  }
  void (*kernel)(const float *, float *, int, int) = strcmp(argv[1], "naive") ? blocked : naive;
  float *src = malloc(sizeof(float) * n * n), *dst = malloc(sizeof(float) * n * n);
  if (!src || !dst) {
    fprintf(stderr, "out of memory for n=%d\n", n);
    return 1;
  }
  for (long k = 0; k < (long)n * n; k++) src[k] = (float)(k % 1000003);
  kernel(src, dst, n, block); /* warm-up: the pages are touched before timing */
  double ms[RUNS];
  for (int r = 0; r < RUNS; r++) {
    memset(dst, 0, sizeof(float) * n * n);
    double t0 = mb_now_ms();
    kernel(src, dst, n, block);
    ms[r] = mb_now_ms() - t0;
  }
  printf("%s n=%d block=%d\n", argv[1], n, block);
  printf("mismatches: %ld\n", mb_transpose_mismatches(src, dst, n));
  printf("time: %.4f ms\n", mb_median(ms, RUNS));
  printf("bandwidth: %.2f GB/s\n", 2.0 * sizeof(float) * n * n / (mb_median(ms, RUNS) * 1e6));
  free(src);
  free(dst);
  return 0;
}
