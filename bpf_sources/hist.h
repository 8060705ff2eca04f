/* Histogram bucketing shared by the BPF programs and the C++ side, so both always
 * agree on what a bucket means. Plain C, no includes: it is compiled by libbcc's
 * clang into BPF and by g++ into the tools and unit tests.
 *
 * Two bucketings:
 *  - hist_log2_slot(v): BCC's log2 slot, floor(log2 v) + 1 (0 and 1 share slot 1),
 *    identical to libbcc's bpf_log2l(), so text output can match BCC's layout.
 *  - hist_fine_index(v): log2-linear ("HDR") buckets: each power of two is split into
 *    HIST_SUB linear sub-buckets. Values below HIST_SUB are exact; above, a bucket is
 *    at most 1/HIST_SUB of its lower bound wide, which bounds the error of a percentile
 *    read from it to 6.25% of the true value. Every fine bucket lies inside exactly one
 *    log2 slot, so the BCC-style histogram is derived from it losslessly.
 */
#ifndef BPFDIAG_HIST_H
#define BPFDIAG_HIST_H

#define HIST_SUB_BITS 4
#define HIST_SUB (1 << HIST_SUB_BITS)
#define HIST_LOG2_SLOTS 65
#define HIST_FINE_BUCKETS ((64 - HIST_SUB_BITS + 1) * HIST_SUB) /* 976 */

/* floor(log2(v)) for v > 0; 0 for v == 0. Branch-light so the verifier accepts it. */
static inline unsigned int hist_floor_log2(unsigned long long v) {
  unsigned int r = 0, shift;
  shift = (v > 0xFFFFFFFFULL) << 5; v >>= shift; r |= shift;
  shift = (v > 0xFFFFULL) << 4; v >>= shift; r |= shift;
  shift = (v > 0xFFULL) << 3; v >>= shift; r |= shift;
  shift = (v > 0xFULL) << 2; v >>= shift; r |= shift;
  shift = (v > 0x3ULL) << 1; v >>= shift; r |= shift;
  r |= (unsigned int)(v >> 1);
  return r;
}

static inline unsigned int hist_log2_slot(unsigned long long v) {
  return hist_floor_log2(v) + 1;
}

static inline unsigned int hist_fine_index(unsigned long long v) {
  if (v < HIST_SUB) return (unsigned int)v;
  unsigned int k = hist_floor_log2(v);
  unsigned int idx = (k - HIST_SUB_BITS + 1) * HIST_SUB +
                     (unsigned int)((v >> (k - HIST_SUB_BITS)) & (HIST_SUB - 1));
  return idx < HIST_FINE_BUCKETS ? idx : HIST_FINE_BUCKETS - 1;
}

#endif
