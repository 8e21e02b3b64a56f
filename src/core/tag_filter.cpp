#include "core/tag_filter.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "core/stored_json.hpp"
#include "core/text.hpp"

namespace wattscope {

namespace {
std::string tag_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}
} // namespace

nlohmann::json run_tags_json(const RunInfo& run) {
  return read_stored_object(run.tags, run.run_id, "runs.tags");
}

std::vector<TagFilter> parse_tag_filters(const std::vector<std::string>& texts) {
  std::vector<TagFilter> out;
  for (const auto& t : texts) {
    try {
      auto [k, v] = parse_tag(t);
      out.push_back({std::move(k), std::move(v)});
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("--tag '{}': {}", excerpt(t), e.what()));
    }
  }
  return out;
}

bool run_matches(const RunInfo& run, const std::vector<TagFilter>& filters) {
  if (filters.empty()) return true;
  const nlohmann::json tags = run_tags_json(run);
  return std::all_of(filters.begin(), filters.end(), [&](const TagFilter& f) {
    auto it = tags.find(f.key);
    return it != tags.end() && tag_text(*it) == f.value;
  });
}

std::vector<RunInfo> filter_runs(std::vector<RunInfo> runs, const std::vector<TagFilter>& filters) {
  std::erase_if(runs, [&](const RunInfo& r) { return !run_matches(r, filters); });
  return runs;
}

} // namespace wattscope
