#include "phases/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace wattscope {

namespace {

// Continued fraction for the incomplete beta function (Numerical Recipes, 2nd ed., betacf), modified Lentz.
double beta_cf(double a, double b, double x) {
  constexpr int kMaxIter = 300;
  constexpr double kEps = 1e-15, kTiny = 1e-300;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= kMaxIter; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < kEps) break;
  }
  return h;
}

// I_x(a, b), the regularized incomplete beta function.
double inc_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double ln_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  const double front = std::exp(ln_front);
  // The continued fraction converges fast for x < (a+1)/(a+b+2); use the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) else.
  if (x < (a + 1) / (a + b + 2)) return front * beta_cf(a, b, x) / a;
  return 1 - front * beta_cf(b, a, 1 - x) / b;
}

double variance(const std::vector<double>& xs, double mean) {
  double ss = 0;
  for (double x : xs)
    ss += (x - mean) * (x - mean);
  return ss / static_cast<double>(xs.size() - 1);
}

double mean_of(const std::vector<double>& xs) {
  double s = 0;
  for (double x : xs)
    s += x;
  return s / static_cast<double>(xs.size());
}

} // namespace

double student_t_cdf(double t, double df) {
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  // P(|T| > |t|) = I_{df/(df+t²)}(df/2, 1/2)
  const double tail = inc_beta(df / 2, 0.5, df / (df + t * t));
  return t >= 0 ? 1 - tail / 2 : tail / 2;
}

double student_t_quantile(double p, double df) {
  if (p <= 0) return -std::numeric_limits<double>::infinity();
  if (p >= 1) return std::numeric_limits<double>::infinity();
  if (p == 0.5) return 0;
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  // Bisection on the CDF: monotone, and 200 halvings of [0, 1e8] reach double precision.
  double lo = 0, hi = 1;
  while (student_t_cdf(hi, df) < p && hi < 1e8)
    hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; ++i) {
    const double mid = (lo + hi) / 2;
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

SampleSummary summarize(const std::vector<double>& xs) {
  SampleSummary s;
  s.n = xs.size();
  if (xs.empty()) return s;
  s.mean = mean_of(xs);
  if (xs.size() < 2) return s;
  s.sd = std::sqrt(variance(xs, s.mean));
  const double half =
      student_t_quantile(0.975, static_cast<double>(xs.size() - 1)) * *s.sd / std::sqrt(static_cast<double>(xs.size()));
  s.ci_low = s.mean - half;
  s.ci_high = s.mean + half;
  s.ci_method = kCiStudentT;
  return s;
}

SampleSummary summarize_nonnegative(const std::vector<double>& xs) {
  SampleSummary s = summarize(xs);
  if (xs.size() < 2) return s;
  bool all_positive = true;
  for (double x : xs)
    all_positive = all_positive && x > 0 && std::isfinite(x);
  if (!all_positive) {
    s.ci_low = std::max(0.0, *s.ci_low);
    s.ci_method = kCiStudentTCut;
    return s;
  }
  std::vector<double> logs;
  logs.reserve(xs.size());
  for (double x : xs)
    logs.push_back(std::log(x));
  const double n = static_cast<double>(xs.size());
  const double ly = mean_of(logs), s2 = variance(logs, ly);
  const double half = student_t_quantile(0.975, n - 1) * std::sqrt(s2 / n + s2 * s2 / (2 * (n - 1)));
  s.ci_low = std::exp(ly + s2 / 2 - half);
  s.ci_high = std::exp(ly + s2 / 2 + half);
  s.ci_method = kCiLogNormal;
  return s;
}

std::optional<WelchTest> welch_t_test(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || b.size() < 2) return std::nullopt;
  const double ma = mean_of(a), mb = mean_of(b);
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  const double va = variance(a, ma) / na, vb = variance(b, mb) / nb;
  WelchTest w;
  if (va + vb == 0) {
    w.t = mb == ma ? 0 : std::copysign(std::numeric_limits<double>::infinity(), mb - ma);
    w.df = na + nb - 2;
    w.p = mb == ma ? 1 : 0;
    return w;
  }
  w.t = (mb - ma) / std::sqrt(va + vb);
  w.df = (va + vb) * (va + vb) / (va * va / (na - 1) + vb * vb / (nb - 1));
  w.p = 2 * student_t_cdf(-std::fabs(w.t), w.df);
  return w;
}

} // namespace wattscope
