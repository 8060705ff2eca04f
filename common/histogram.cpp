#include "common/histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

extern "C" {
#include "hist.h"
}

namespace bpfdiag {

BucketRange fine_bucket_range(unsigned idx) {
  if (idx < HIST_SUB) return {idx, idx};
  unsigned k = idx / HIST_SUB + HIST_SUB_BITS - 1;  // floor(log2) of the bucket
  unsigned sub = idx % HIST_SUB;
  unsigned shift = k - HIST_SUB_BITS;
  uint64_t lo = static_cast<uint64_t>(HIST_SUB + sub) << shift;
  uint64_t width = 1ULL << shift;
  return {lo, lo + width - 1};
}

Histogram::Histogram() : fine_(HIST_FINE_BUCKETS, 0) {}

void Histogram::record(uint64_t value, uint64_t count) {
  fine_[hist_fine_index(value)] += count;
  count_ += count;
  sum_ += value * count;
  max_ = std::max(max_, value);
  exact_sum_ = exact_max_ = true;
}

void Histogram::add_bucket(unsigned idx, uint64_t count) {
  if (idx >= fine_.size()) idx = static_cast<unsigned>(fine_.size() - 1);
  fine_[idx] += count;
  count_ += count;
}

void Histogram::merge(const Histogram& o) {
  // The result is exact only if neither side contributes an estimate.
  bool exact_sum = (exact_sum_ || empty()) && (o.exact_sum_ || o.empty());
  bool exact_max = (exact_max_ || empty()) && (o.exact_max_ || o.empty());
  uint64_t s = sum() + o.sum(), m = std::max(max(), o.max());
  for (size_t i = 0; i < fine_.size(); ++i) fine_[i] += o.fine_[i];
  count_ += o.count_;
  sum_ = s;
  max_ = m;
  exact_sum_ = exact_sum;
  exact_max_ = exact_max;
}

uint64_t Histogram::sum() const {
  if (exact_sum_) return sum_;
  long double s = 0;
  for (size_t i = 0; i < fine_.size(); ++i)
    if (fine_[i]) {
      auto r = fine_bucket_range(static_cast<unsigned>(i));
      s += fine_[i] * ((static_cast<long double>(r.lo) + r.hi) / 2);
    }
  return static_cast<uint64_t>(s);
}

uint64_t Histogram::max() const {
  if (exact_max_) return max_;
  for (size_t i = fine_.size(); i-- > 0;)
    if (fine_[i]) return fine_bucket_range(static_cast<unsigned>(i)).hi;
  return 0;
}

uint64_t Histogram::percentile(double p) const {
  if (count_ == 0) return 0;
  p = std::clamp(p, 0.0, 100.0);
  // rank in [1, count]: the smallest observation with at least p% at or below it
  double rank = std::max(1.0, std::ceil(p / 100.0 * static_cast<double>(count_)));
  if (exact_max_ && rank >= static_cast<double>(count_)) return max_;
  uint64_t seen = 0;
  for (size_t i = 0; i < fine_.size(); ++i) {
    if (!fine_[i]) continue;
    if (seen + fine_[i] >= rank) {
      auto r = fine_bucket_range(static_cast<unsigned>(i));
      // position of the rank inside the bucket, spread evenly over the bucket
      double frac = (rank - seen - 0.5) / static_cast<double>(fine_[i]);
      uint64_t v = r.lo + static_cast<uint64_t>(frac * static_cast<double>(r.hi - r.lo + 1));
      v = std::min(v, r.hi);
      return (exact_max_ && v > max_) ? max_ : v;
    }
    seen += fine_[i];
  }
  return max();
}

std::vector<uint64_t> Histogram::log2_slots() const {
  std::vector<uint64_t> slots(HIST_LOG2_SLOTS, 0);
  for (size_t i = 0; i < fine_.size(); ++i)
    if (fine_[i]) slots[hist_log2_slot(fine_bucket_range(static_cast<unsigned>(i)).lo)] += fine_[i];
  while (!slots.empty() && slots.back() == 0) slots.pop_back();
  return slots;
}

nlohmann::json Histogram::to_json() const {
  nlohmann::json buckets = nlohmann::json::array();
  auto slots = log2_slots();
  for (size_t i = 1; i < slots.size(); ++i) {
    if (!slots[i]) continue;
    uint64_t lo = i == 1 ? 0 : (1ULL << (i - 1));
    uint64_t hi = i >= 64 ? UINT64_MAX : (1ULL << i) - 1;
    buckets.push_back({{"min", lo}, {"max", hi}, {"count", slots[i]}});
  }
  return {{"buckets", buckets}};
}

std::string hist_stars(uint64_t val, uint64_t val_max, int width) {
  if (val_max == 0) return "";
  long double n = static_cast<long double>(width) * val / val_max;
  int stars = static_cast<int>(std::min<long double>(std::floor(n), width));
  std::string text(static_cast<size_t>(std::max(stars, 0)), '*');
  if (val > val_max && !text.empty()) text.back() = '+';
  return text;
}

void print_log2_hist(std::ostream& os, const std::vector<uint64_t>& slots,
                     const std::string& val_type) {
  size_t idx_max = 0;
  uint64_t val_max = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i]) idx_max = i;
    val_max = std::max(val_max, slots[i]);
  }
  if (idx_max == 0 && (slots.empty() || slots[0] == 0)) return;
  bool wide = idx_max > 32;
  int stars_max = wide ? 20 : 40;
  char line[256];
  std::snprintf(line, sizeof line,
                wide ? "               %-29s : count     distribution\n"
                     : "     %-19s : count     distribution\n",
                val_type.c_str());
  os << line;
  for (size_t i = 1; i <= idx_max; ++i) {
    uint64_t low = 1ULL << (i - 1), high = i >= 64 ? UINT64_MAX : (1ULL << i) - 1;
    if (low == high) low -= 1;
    uint64_t val = slots[i];
    std::string stars = hist_stars(val, val_max, stars_max);
    std::snprintf(line, sizeof line,
                  wide ? "%20llu -> %-20llu : %-8llu |%-20s|\n"
                       : "%10llu -> %-10llu : %-8llu |%-40s|\n",
                  static_cast<unsigned long long>(low), static_cast<unsigned long long>(high),
                  static_cast<unsigned long long>(val), stars.c_str());
    os << line;
  }
}

void print_linear_hist(std::ostream& os, const std::map<int64_t, uint64_t>& buckets,
                       const std::string& val_type) {
  if (buckets.empty()) return;
  uint64_t val_max = 0;
  for (auto& [k, v] : buckets) val_max = std::max(val_max, v);
  char line[256];
  std::snprintf(line, sizeof line, "     %-13s : count     distribution\n", val_type.c_str());
  os << line;
  // like BCC, rows start at 0 (or at the lowest bucket if it is negative)
  int64_t lo = std::min<int64_t>(0, buckets.begin()->first), hi = buckets.rbegin()->first;
  for (int64_t k = lo; k <= hi; ++k) {
    auto it = buckets.find(k);
    uint64_t val = it == buckets.end() ? 0 : it->second;
    std::snprintf(line, sizeof line, "        %-10lld : %-8llu |%-40s|\n",
                  static_cast<long long>(k), static_cast<unsigned long long>(val),
                  hist_stars(val, val_max, 40).c_str());
    os << line;
  }
}

double linear_percentile(const std::map<int64_t, uint64_t>& buckets, double p) {
  uint64_t total = 0;
  for (auto& [k, v] : buckets) total += v;
  if (!total) return 0;
  double rank = std::max(1.0, std::ceil(p / 100.0 * static_cast<double>(total)));
  uint64_t seen = 0;
  for (auto& [k, v] : buckets) {
    seen += v;
    if (seen >= rank) return static_cast<double>(k);
  }
  return static_cast<double>(buckets.rbegin()->first);
}

double linear_mean(const std::map<int64_t, uint64_t>& buckets) {
  long double total = 0, sum = 0;
  for (auto& [k, v] : buckets) {
    total += v;
    sum += static_cast<long double>(k) * v;
  }
  return total ? static_cast<double>(sum / total) : 0.0;
}

}  // namespace bpfdiag
