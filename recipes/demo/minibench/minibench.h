/* minibench: a tiny timing and checking library, the demo paper's dependency (kept in its own source, as a
 * paper keeps CUTLASS or a timer library in a submodule). Written for kernellab's demo recipe. */
#ifndef MINIBENCH_H
#define MINIBENCH_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double mb_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int mb_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of n timings (sorts them). */
static inline double mb_median(double *ms, int n) {
  qsort(ms, n, sizeof ms[0], mb_cmp);
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

/* How many of an n x n matrix's elements differ from the transpose of src. */
static inline long mb_transpose_mismatches(const float *src, const float *dst, int n) {
  long bad = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      bad += dst[(long)j * n + i] != src[(long)i * n + j];
  return bad;
}

#endif
