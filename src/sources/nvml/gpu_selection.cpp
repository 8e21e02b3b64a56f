#include "sources/nvml/gpu_selection.hpp"

#include <charconv>
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
bool is_digits(const std::string& t) {
  if (t.empty()) return false;
  for (char c : t)
    if (c < '0' || c > '9') return false;
  return true;
}
// The index a token of digits names, or nullopt when it is beyond kMaxGpuIndex (however many digits it has).
std::optional<int> index_of(const std::string& t) {
  int v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || v > kMaxGpuIndex) return std::nullopt;
  return v;
}
// "GPU-" or "MIG-" and at least one character of the UUID: a bare prefix would match every device.
bool is_uuid(const std::string& t) {
  return t.size() > 4 && (t.starts_with("GPU-") || t.starts_with("MIG-"));
}
} // namespace

bool GpuSelection::selects(int index, const std::string& uuid) const {
  if (all) return true;
  for (const auto& t : tokens) {
    if (is_digits(t)) {
      if (index_of(t) == index) return true;
    } else if (!uuid.empty() && uuid.starts_with(t)) {
      return true; // CUDA accepts UUID prefixes too
    }
  }
  return false;
}

std::string GpuSelection::mig_match(const std::vector<std::string>& mig_uuids) const {
  if (all) return {};
  for (const auto& t : tokens)
    if (t.starts_with("MIG-"))
      for (const auto& m : mig_uuids)
        if (m.starts_with(t)) return t;
  return {};
}

bool GpuSelection::names_mig() const {
  for (const auto& t : tokens)
    if (t.starts_with("MIG-")) return true;
  return false;
}

GpuSelection parse_gpu_selection(const std::string& flag, const std::optional<std::string>& cuda_visible,
                                 const std::optional<std::string>& cuda_order) {
  GpuSelection sel;
  if (!flag.empty()) {
    sel.origin = "--gpus";
    if (flag == "all") return sel;
    sel.all = false;
    if (flag == "none") return sel;
    if (flag.starts_with("free"))
      throw std::invalid_argument(
          fmt::format("--gpus '{}': free:N takes idle GPUs for a command, so it is for `wattscope run` only", flag));
    for (auto& t : split_list(flag)) {
      if (is_digits(t) && !index_of(t))
        throw std::invalid_argument(fmt::format("--gpus '{}': GPU index '{}' is out of range; indices run from 0 to {}",
                                                flag, t, kMaxGpuIndex));
      if (!is_digits(t) && !is_uuid(t))
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
    if (t.empty() || t.starts_with("-")) break;
    if (is_digits(t) && !index_of(t)) {
      // Not a typo the user can see: the variable came from a scheduler or a script. Record every GPU rather than
      // refuse the job or guess which GPUs it meant.
      sel.all = true;
      sel.tokens.clear();
      sel.warning = fmt::format("CUDA_VISIBLE_DEVICES: GPU index '{}' is out of range (0 to {}); recording all GPUs "
                                "(pass --gpus to choose)",
                                t, kMaxGpuIndex);
      return sel;
    }
    if (!is_digits(t) && !is_uuid(t)) break;
    if (is_digits(t) && cuda_order.value_or("FASTEST_FIRST") != "PCI_BUS_ID") sel.cuda_fastest_first = true;
    sel.tokens.push_back(t);
  }
  return sel;
}

} // namespace wattscope
