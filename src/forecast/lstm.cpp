// The LSTM forecaster the design names (y_t = f(y_{t-1} ... y_{t-n}), issue 36), trained offline with PyTorch
// (bench/train_lstm.py) and shipped as weights compiled in (lstm_weights.inc): docs/forecasts.md says why.
// Inference only, one LSTM cell step per observed value (the state carries the history, so nothing is re-read) and
// one linear head per forecast: a few microseconds per device per tick.
#include "forecast/models.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

namespace wattscope::forecast {
namespace {

#include "forecast/lstm_weights.inc"

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXf;

// The weights, mapped once: PyTorch's layout (gates i, f, g, o stacked; row-major), biases b_ih + b_hh summed.
struct LstmWeights {
  Eigen::Map<const Mat> w_ih{kLstmWih, 4 * kLstmHidden, kLstmInputs};
  Eigen::Map<const Mat> w_hh{kLstmWhh, 4 * kLstmHidden, kLstmHidden};
  Eigen::Map<const Vec> bias{kLstmBias, 4 * kLstmHidden};
  Eigen::Map<const Mat> head_w{kLstmHeadW, kLstmHorizons, kLstmHidden};
  Eigen::Map<const Vec> head_b{kLstmHeadB, kLstmHorizons};
};

const LstmWeights& weights() {
  static const LstmWeights w;
  return w;
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

class Lstm final : public SeriesModel {
public:
  Lstm() : h_(Vec::Zero(kLstmHidden)), c_(Vec::Zero(kLstmHidden)), gates_(4 * kLstmHidden) {}
  std::string_view name() const override { return "lstm"; }

  // The inputs are scale-free, so that one set of weights serves watts, percent and bytes: the value and its step,
  // both over a running scale (an exponential mean of |y - mean|). bench/train_lstm.py computes the same features;
  // a change here is a change there.
  void observe(double y) override {
    if (std::isnan(y)) return; // missing: skipped, the state waits for the next reading
    if (n_ == 0) {
      mean_ = y;
      spread_ = 0;
      prev_ = y;
    } else {
      mean_ += kLstmAlpha * (y - mean_);
      spread_ += kLstmAlpha * (std::abs(y - mean_) - spread_);
    }
    ++n_;
    const double s = scale();
    Eigen::Vector<float, kLstmInputs> x;
    x[0] = static_cast<float>(std::clamp((y - mean_) / s, -kLstmClip, kLstmClip));
    x[1] = static_cast<float>(std::clamp((y - prev_) / s, -kLstmClip, kLstmClip));
    prev_ = y;
    const LstmWeights& w = weights();
    gates_.noalias() = w.w_ih * x;
    gates_.noalias() += w.w_hh * h_;
    gates_ += w.bias;
    const int H = kLstmHidden;
    for (int j = 0; j < H; ++j) {
      const float i = sigmoid(gates_[j]), f = sigmoid(gates_[H + j]), g = std::tanh(gates_[2 * H + j]),
                  o = sigmoid(gates_[3 * H + j]);
      c_[j] = f * c_[j] + i * g;
      h_[j] = o * std::tanh(c_[j]);
    }
  }

  // Each step ahead up to kLstmHorizons is its own output (no feeding forecasts back); beyond it the last is held.
  std::vector<double> forecast(std::size_t horizon) const override {
    if (n_ == 0) return {};
    const LstmWeights& w = weights();
    const Vec d = w.head_w * h_ + w.head_b;
    const double s = scale();
    std::vector<double> out(horizon);
    for (std::size_t h = 0; h < horizon; ++h)
      out[h] =
          prev_ + s * static_cast<double>(d[static_cast<Eigen::Index>(std::min<std::size_t>(h, kLstmHorizons - 1))]);
    return out;
  }

private:
  // The floor keeps a constant series (spread 0) from dividing by zero; relative, so that it means the same in
  // bytes as in percent.
  double scale() const { return std::max(spread_, 1e-3 * std::abs(mean_) + 1e-9); }

  Vec h_, c_, gates_;
  double mean_ = 0, spread_ = 0, prev_ = 0;
  std::size_t n_ = 0;
};

} // namespace

std::unique_ptr<SeriesModel> make_lstm() {
  return std::make_unique<Lstm>();
}

} // namespace wattscope::forecast
