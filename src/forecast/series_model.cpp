#include "forecast/series_model.hpp"

#include "forecast/models.hpp"

#include <cmath>

namespace wattscope::forecast {
namespace {

class LastValue final : public SeriesModel {
public:
  std::string_view name() const override { return "last"; }
  void observe(double y) override {
    if (!std::isnan(y)) {
      last_ = y;
      seen_ = true;
    }
  }
  std::vector<double> forecast(std::size_t horizon) const override {
    if (!seen_) return {};
    return std::vector<double>(horizon, last_);
  }

private:
  double last_ = 0;
  bool seen_ = false;
};

} // namespace

std::unique_ptr<SeriesModel> make_series_model(std::string_view name) {
  if (name == "last") return std::make_unique<LastValue>();
  if (name == "seasonal_naive") return make_seasonal_naive();
  if (name == "holt_winters") return make_holt_winters();
  if (name == "lstm") return make_lstm();
  return nullptr;
}

std::vector<std::string> series_model_names() {
  return {"last", "seasonal_naive", "holt_winters", "lstm"};
}

std::string_view default_series_model() {
  return "seasonal_naive";
} // bench/forecast_eval's held-out winner

} // namespace wattscope::forecast
