// One strict parser for numbers, durations and ID lists, shared by every tool.
// Rejects empty input, signs where not allowed, trailing junk, overflow and values
// outside [min, max], naming the allowed range in the message.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

// Unsigned decimal integer in [min, max]. `what` names the value in errors.
Result<uint64_t> parse_uint(const std::string& s, const std::string& what, uint64_t min,
                            uint64_t max);

// Duration with an optional unit: ns, us, ms, s (default unit `default_unit_ns`),
// m, h. "1.5s" and "250ms" are accepted. Returns nanoseconds within [min_ns, max_ns].
Result<uint64_t> parse_duration_ns(const std::string& s, const std::string& what,
                                   uint64_t default_unit_ns, uint64_t min_ns, uint64_t max_ns);

// Most IDs a -p/-t list may hold (BPF filters beyond a handful of IDs use a map of
// this size, see common/filters.h).
constexpr size_t kMaxIdList = 4096;

// Comma-separated list of positive IDs ("123,456"), each in [1, 4194304] (pid_max),
// duplicates dropped (first occurrence kept), at most kMaxIdList distinct IDs.
Result<std::vector<uint32_t>> parse_id_list(const std::string& s, const std::string& what);

// Human-readable duration for messages, e.g. "1.50 s", "250 ms".
std::string format_duration(uint64_t ns);
// "0x1f": an address or offset in messages and frame names.
std::string format_hex(uint64_t v);

}  // namespace bpfdiag
