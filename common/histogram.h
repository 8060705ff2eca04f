// Histograms: fine log2-linear buckets (see bpf_sources/hist.h) with exact count, sum
// and max; BCC-layout text for log2 and linear histograms; percentiles; JSON buckets.
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bpfdiag {

// Inclusive value range [lo, hi] covered by a fine bucket.
struct BucketRange {
  uint64_t lo, hi;
};
BucketRange fine_bucket_range(unsigned idx);

class Histogram {
 public:
  Histogram();
  void record(uint64_t value, uint64_t count = 1);
  // Adds `count` observations known only by their fine bucket (as read from BPF maps).
  void add_bucket(unsigned idx, uint64_t count);
  void merge(const Histogram& other);
  // Exact sum/max when the BPF side tracks them; otherwise estimated from buckets.
  void set_exact_sum(uint64_t sum) { sum_ = sum; exact_sum_ = true; }
  void set_exact_max(uint64_t max) { max_ = max; exact_max_ = true; }

  uint64_t count() const { return count_; }
  uint64_t sum() const;
  uint64_t max() const;
  uint64_t mean() const { return count_ ? sum() / count_ : 0; }
  // Value at percentile p (0..100): interpolated inside the fine bucket holding that
  // rank. |estimate - true| <= bucket width <= true / 16 (exact below 16).
  uint64_t percentile(double p) const;
  // BCC log2 slots (index = floor(log2 v) + 1), trailing zero slots trimmed.
  std::vector<uint64_t> log2_slots() const;
  // {"buckets":[{"min":..,"max":..,"count":..}]} over non-empty log2 slots.
  nlohmann::json to_json() const;
  bool empty() const { return count_ == 0; }

 private:
  std::vector<uint64_t> fine_;
  uint64_t count_ = 0, sum_ = 0, max_ = 0;
  bool exact_sum_ = false, exact_max_ = false;
};

// Byte-for-byte BCC print_log2_hist layout. `slots` indexed as BCC's bpf_log2l.
void print_log2_hist(std::ostream& os, const std::vector<uint64_t>& slots,
                     const std::string& val_type);
// Byte-for-byte BCC print_linear_hist layout; key = bucket value.
void print_linear_hist(std::ostream& os, const std::map<int64_t, uint64_t>& buckets,
                       const std::string& val_type);
// BCC's star bar: floor(width * val / max) stars, '+' as the last char when val > max.
std::string hist_stars(uint64_t val, uint64_t val_max, int width);

// Percentile of a linear histogram (exact for integer-valued samples).
double linear_percentile(const std::map<int64_t, uint64_t>& buckets, double p);
double linear_mean(const std::map<int64_t, uint64_t>& buckets);

}  // namespace bpfdiag
