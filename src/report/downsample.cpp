#include "report/downsample.hpp"

#include <algorithm>

namespace wattscope {

MinMaxDownsampler::MinMaxDownsampler(double t_end, size_t buckets)
    : width_(t_end > 0 && buckets > 0 ? t_end / static_cast<double>(buckets) : 0), buckets_(buckets) {}

MinMaxDownsampler::MinMaxDownsampler(double t_begin, double t_end, size_t buckets)
    : begin_(t_begin), end_(t_end), windowed_(true),
      width_(t_end > t_begin && buckets > 0 ? (t_end - t_begin) / static_cast<double>(buckets) : 0), buckets_(buckets) {
}

void MinMaxDownsampler::add(double t, double y) {
  if (windowed_ && (t < begin_ || t > end_)) return;
  ++seen_;
  if (width_ <= 0) { // nothing to bucket by: keep everything
    t_.push_back(t);
    y_.push_back(y);
    return;
  }
  long b = static_cast<long>((t - begin_) / width_);
  b = std::clamp<long>(b, 0, static_cast<long>(buckets_) - 1);
  if (b != bucket_) {
    flush();
    bucket_ = b;
  }
  if (!have_) {
    min_t_ = max_t_ = t;
    min_y_ = max_y_ = y;
    have_ = true;
  } else {
    if (y < min_y_) {
      min_y_ = y;
      min_t_ = t;
    }
    if (y > max_y_) {
      max_y_ = y;
      max_t_ = t;
    }
  }
  ++count_;
}

void MinMaxDownsampler::flush() {
  if (!have_) return;
  if (count_ == 1 || (min_t_ == max_t_)) {
    t_.push_back(min_t_);
    y_.push_back(min_y_);
  } else if (min_t_ < max_t_) {
    t_.insert(t_.end(), {min_t_, max_t_});
    y_.insert(y_.end(), {min_y_, max_y_});
  } else {
    t_.insert(t_.end(), {max_t_, min_t_});
    y_.insert(y_.end(), {max_y_, min_y_});
  }
  have_ = false;
  count_ = 0;
}

void MinMaxDownsampler::finish() {
  flush();
}

} // namespace wattscope
