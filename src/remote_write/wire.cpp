#include "remote_write/wire.hpp"

#include <bit>
#include <cstdint>
#include <cstring>

#include "core/lazy/lazy_lib.hpp"

namespace wattscope::remote_write {

namespace {

// Protobuf's wire format (protobuf.dev, "Encoding"): a key is (field number << 3) | wire type; 0 varint, 1 64-bit,
// 2 length-delimited.
constexpr uint8_t key(uint32_t field, uint32_t type) {
  return static_cast<uint8_t>((field << 3) | type);
}
constexpr uint32_t kVarint = 0, kFixed64 = 1, kBytes = 2;

size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
size_t bytes_field_size(size_t len) {
  return 1 + varint_size(len) + len;
}
void put_bytes_field(std::string& out, uint32_t field, std::string_view s) {
  out.push_back(static_cast<char>(key(field, kBytes)));
  put_varint(out, s.size());
  out.append(s);
}

// Label { string name = 1; string value = 2; }
size_t label_size(const std::pair<std::string, std::string>& l) {
  return (l.first.empty() ? 0 : bytes_field_size(l.first.size())) +
         (l.second.empty() ? 0 : bytes_field_size(l.second.size()));
}
// Sample { double value = 1; int64 timestamp = 2; } (an int64 is a varint of its two's complement)
size_t sample_size(const std::pair<int64_t, double>& s) {
  return (std::bit_cast<uint64_t>(s.second) ? 9 : 0) + (s.first ? 1 + varint_size(static_cast<uint64_t>(s.first)) : 0);
}
// TimeSeries { repeated Label labels = 1; repeated Sample samples = 2; }
size_t series_size(const Series& s) {
  size_t n = 0;
  for (const auto& l : s.labels)
    n += bytes_field_size(label_size(l));
  for (const auto& x : s.samples)
    n += bytes_field_size(sample_size(x));
  return n;
}

} // namespace

std::string encode_write_request(std::span<const Series> series) {
  size_t total = 0;
  for (const auto& s : series)
    total += bytes_field_size(series_size(s));
  std::string out;
  out.reserve(total);
  for (const auto& s : series) {
    out.push_back(static_cast<char>(key(1, kBytes)));
    put_varint(out, series_size(s));
    for (const auto& l : s.labels) {
      out.push_back(static_cast<char>(key(1, kBytes)));
      put_varint(out, label_size(l));
      if (!l.first.empty()) put_bytes_field(out, 1, l.first);
      if (!l.second.empty()) put_bytes_field(out, 2, l.second);
    }
    for (const auto& x : s.samples) {
      out.push_back(static_cast<char>(key(2, kBytes)));
      put_varint(out, sample_size(x));
      if (const uint64_t bits = std::bit_cast<uint64_t>(x.second)) {
        out.push_back(static_cast<char>(key(1, kFixed64)));
        for (int i = 0; i < 8; ++i) // little-endian
          out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
      }
      if (x.first) {
        out.push_back(static_cast<char>(key(2, kVarint)));
        put_varint(out, static_cast<uint64_t>(x.first));
      }
    }
  }
  return out;
}

std::optional<std::string> snappy_compress(std::string_view raw, std::string& error) {
  // snappy-c.h: snappy_status is an int-sized enum, SNAPPY_OK = 0.
  using MaxLen = size_t(size_t);
  using Compress = int(const char*, size_t, char*, size_t*);
  static auto* max_len = lazy::function<MaxLen>(lazy::snappy(), "snappy_max_compressed_length");
  static auto* compress = lazy::function<Compress>(lazy::snappy(), "snappy_compress");
  if (!max_len || !compress) {
    error = lazy::snappy().error();
    return std::nullopt;
  }
  std::string out(max_len(raw.size()), '\0');
  size_t n = out.size();
  if (compress(raw.data(), raw.size(), out.data(), &n) != 0) {
    error = "snappy could not compress the batch";
    return std::nullopt;
  }
  out.resize(n);
  return out;
}

} // namespace wattscope::remote_write
