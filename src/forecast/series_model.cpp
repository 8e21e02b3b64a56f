#include "forecast/series_model.hpp"

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
  return nullptr;
}

std::vector<std::string> series_model_names() {
  return {"last"};
}

std::string_view default_series_model() {
  return "last";
}

} // namespace wattscope::forecast
