#include "processes/kubelet.hpp"

#include "core/lazy/http_get.hpp"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/thread_name.hpp"
#include "processes/procfs.hpp"

namespace wattscope {

std::map<std::string, PodName> parse_kubelet_pods(std::string_view json_text) {
  const auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::runtime_error("the kubelet's /pods answer is not JSON");
  if (!j.is_object() || !j.contains("items") || !j["items"].is_array())
    throw std::runtime_error(fmt::format(
        "the kubelet's /pods answer has no 'items' list (kind '{}')",
        j.is_object() && j.contains("kind") && j["kind"].is_string() ? j["kind"].get<std::string>() : std::string()));
  std::map<std::string, PodName> out;
  auto str = [](const nlohmann::json& m, const char* key) -> std::string {
    auto it = m.find(key);
    return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  for (const auto& item : j["items"]) {
    if (!item.is_object()) continue;
    auto md = item.find("metadata");
    if (md == item.end() || !md->is_object()) continue;
    // The cgroup directory is named after metadata.uid: for a static pod that is the kubelet's config hash, which the
    // kubelet's own list reports as its uid (the API server's mirror pod has another one).
    std::string uid = str(*md, "uid"), ns = str(*md, "namespace"), name = str(*md, "name");
    if (uid.empty() || ns.empty() || name.empty()) continue;
    out[std::move(uid)] = {std::move(ns), std::move(name)};
  }
  return out;
}

std::optional<KubeletOptions> kubelet_options_from_env() {
  KubeletOptions o;
  if (const char* url = std::getenv("WATTSCOPE_KUBELET_URL"); url && *url) {
    if (std::string_view(url) == "off") return std::nullopt;
    o.url = url;
  }
  if (const char* t = std::getenv("WATTSCOPE_KUBELET_TOKEN_FILE"); t && *t) o.token_file = t;
  if (const char* ca = std::getenv("WATTSCOPE_KUBELET_CA_FILE"); ca && *ca) o.ca_file = ca;
  return o;
}

KubeletPodNames::KubeletPodNames(KubeletOptions opts) : opts_(std::move(opts)) {}

KubeletPodNames::~KubeletPodNames() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<PodName> KubeletPodNames::find(const std::string& uid) {
  std::lock_guard lk(mu_);
  if (auto it = pods_.find(uid); it != pods_.end()) return it->second;
  const auto now = std::chrono::steady_clock::now();
  if (!wanted_ && (!fetched_once_ || now - last_fetch_ >= opts_.min_refresh)) {
    wanted_ = true;
    if (!started_) {
      started_ = true;
      thread_ = std::thread([this] { loop(); });
    }
    cv_.notify_all();
  }
  return std::nullopt;
}

KubeletPodNames::Stats KubeletPodNames::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void KubeletPodNames::loop() {
  name_this_thread("ws-kubelet");
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || wanted_; });
    if (stop_) return;
    lk.unlock();
    std::string error;
    std::optional<std::map<std::string, PodName>> pods;
    if (auto body = fetch(error)) {
      try {
        pods = parse_kubelet_pods(*body);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    lk.lock();
    last_fetch_ = std::chrono::steady_clock::now();
    fetched_once_ = true;
    wanted_ = false;
    if (pods) {
      // Replaced whole: pods deleted since are dropped, and a uid is never renamed.
      pods_ = std::move(*pods);
      ++stats_.fetches_ok;
      if (said_failure_) spdlog::info("kubelet: {} answers again; pods are named", opts_.url);
      said_failure_ = false;
    } else {
      ++stats_.fetches_failed;
      stats_.last_error = error;
      if (!said_failure_)
        spdlog::warn("kubelet: no pod names from {}: {}; pods are shown by uid only (set WATTSCOPE_KUBELET_URL, "
                     "docs/kubernetes.md)",
                     opts_.url, error);
      said_failure_ = true;
    }
  }
}

std::optional<std::string> KubeletPodNames::fetch(std::string& error) const {
  HttpGet get;
  get.url = opts_.url;
  get.timeout = opts_.timeout;
  get.max_body_bytes = opts_.max_body_bytes;
  get.ca_file = opts_.ca_file;
  get.user_agent = "wattscope-kubelet";
  if (!opts_.token_file.empty()) {
    std::string token;
    if (!read_small_file(opts_.token_file, token)) {
      error = fmt::format("cannot read the token file {}", opts_.token_file);
      return std::nullopt;
    }
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
      token.pop_back();
    get.bearer_token = std::move(token);
  }
  return http_get(get, error);
}

} // namespace wattscope
