// Peak-preserving downsampling while streaming: the time axis is cut into equal buckets and each bucket keeps its
// minimum and its maximum point, in time order (MinMax). Memory is O(buckets) whatever the run's length, and a
// 1-tick spike is never averaged away.
#pragma once

#include <cstddef>
#include <vector>

namespace wattscope {

class MinMaxDownsampler {
public:
  // t_end: the time span to cover (seconds); points past it fall into the last bucket.
  MinMaxDownsampler(double t_end, size_t buckets);
  // A window [t_begin, t_end] cut into `buckets`: points outside it are left out (a report zoomed to a minute keeps
  // its resolution for that minute).
  MinMaxDownsampler(double t_begin, double t_end, size_t buckets);
  void add(double t, double y);
  // Flushes the open bucket; call once before reading t()/y().
  void finish();
  const std::vector<double>& t() const { return t_; }
  const std::vector<double>& y() const { return y_; }
  size_t seen() const { return seen_; }

private:
  void flush();
  double begin_ = 0;
  double end_ = 0;
  bool windowed_ = false;
  double width_;
  size_t buckets_;
  long bucket_ = -1;
  bool have_ = false;
  double min_t_ = 0, min_y_ = 0, max_t_ = 0, max_y_ = 0;
  size_t count_ = 0;
  size_t seen_ = 0;
  std::vector<double> t_, y_;
};

} // namespace wattscope
