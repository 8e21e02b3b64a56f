// Statistics over repeated runs (issue 15): mean, standard deviation, a 95 % confidence interval by Student's t,
// and Welch's t-test for "is this difference larger than run-to-run noise". No dependencies: Student's t comes from
// the regularized incomplete beta function (continued fraction, Numerical Recipes 6.4).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace wattscope {

struct SampleSummary {
  size_t n = 0;
  double mean = 0;
  std::optional<double> sd;     // sample standard deviation (n - 1); needs n >= 2
  std::optional<double> ci_low; // 95 % confidence interval of the mean (how: ci_method); needs n >= 2
  std::optional<double> ci_high;
  const char* ci_method = nullptr; // one of the kCi* below, with the interval
};

// The 95 % intervals of the mean, by name (the --json of stats and compare carries these words).
inline constexpr const char* kCiStudentT = "student-t";      // mean ± t(0.975, n-1)·sd/√n
inline constexpr const char* kCiLogNormal = "lognormal-cox"; // see summarize_nonnegative
inline constexpr const char* kCiStudentTCut = "student-t-cut-at-0";

// Missing values are the caller's to leave out; an empty input gives n = 0. Student's t interval.
SampleSummary summarize(const std::vector<double>& xs);

// For a quantity that cannot be negative (energy, duration, J per unit, throughput), an interval that cannot go below
// 0 (issue 29: a t interval of three energies 5, 5, 200 J reaches -210 J). With every value > 0 it is the modified
// Cox interval for the mean of a log-normal quantity (Zhou & Gao 1997; Olsson 2005): with y = ln x, mean ȳ and
// variance s² of y, exp(ȳ + s²/2 ± t(0.975, n-1)·√(s²/n + s⁴/(2(n-1)))). Where a value is 0 (no log), the t interval
// with its lower end cut at 0. The mean and sd are the plain ones of xs.
SampleSummary summarize_nonnegative(const std::vector<double>& xs);

// P(T <= t) for Student's t with df > 0 degrees of freedom (df need not be whole: Welch's is not).
double student_t_cdf(double t, double df);
// The t with P(T <= t) = p, 0 < p < 1.
double student_t_quantile(double p, double df);

struct WelchTest {
  double t = 0;  // (mean_b - mean_a) / sqrt(var_a/n_a + var_b/n_b)
  double df = 0; // Welch–Satterthwaite
  double p = 1;  // two-sided
};
// Needs at least two values on each side; nullopt otherwise. With no variance on either side the difference is
// exact: p is 0 when the means differ, 1 when they do not (t = ±inf or 0).
std::optional<WelchTest> welch_t_test(const std::vector<double>& a, const std::vector<double>& b);

} // namespace wattscope
