#include "sources/nvml/gpu_selection.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace wattscope {

namespace {
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string tok = s.substr(start, end - start);
    while (!tok.empty() && tok.front() == ' ')
      tok.erase(tok.begin());
    while (!tok.empty() && tok.back() == ' ')
      tok.pop_back();
    out.push_back(tok);
    start = end + 1;
  }
  return out;
}
bool is_index(const std::string& t) {
  if (t.empty()) return false;
  for (char c : t)
    if (c < '0' || c > '9') return false;
  return true;
}
} // namespace

bool GpuSelection::selects(int index, const std::string& uuid) const {
  if (all) return true;
  for (const auto& t : tokens) {
    if (is_index(t) && std::stoi(t) == index) return true;
    if (!is_index(t) && !uuid.empty() && uuid.rfind(t, 0) == 0) return true; // CUDA accepts UUID prefixes too
  }
  return false;
}

GpuSelection parse_gpu_selection(const std::string& flag, const std::optional<std::string>& cuda_visible) {
  GpuSelection sel;
  if (!flag.empty()) {
    sel.origin = "--gpus";
    if (flag == "all") return sel;
    sel.all = false;
    if (flag == "none") return sel;
    for (auto& t : split_list(flag)) {
      if (t.empty() || (!is_index(t) && t.rfind("GPU-", 0) != 0 && t.rfind("MIG-", 0) != 0))
        throw std::invalid_argument(fmt::format(
            "--gpus '{}': '{}' is neither a GPU index nor a GPU-/MIG- UUID; use all, 0,2 or GPU-…", flag, t));
      sel.tokens.push_back(t);
    }
    return sel;
  }
  if (!cuda_visible) {
    sel.origin = "default";
    return sel;
  }
  sel.origin = "CUDA_VISIBLE_DEVICES";
  sel.all = false;
  // CUDA stops at the first invalid entry; "-1" or "" hides every device.
  for (auto& t : split_list(*cuda_visible)) {
    if (t.empty() || t.rfind("-", 0) == 0) break;
    if (!is_index(t) && t.rfind("GPU-", 0) != 0 && t.rfind("MIG-", 0) != 0) break;
    sel.tokens.push_back(t);
  }
  return sel;
}

} // namespace wattscope
