#include "processes/kubelet.hpp"

#include "core/lazy/lazy_lib.hpp"

#include <cstdlib>
#include <stdexcept>

#include <curl/curl.h>
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

namespace {
struct Body {
  std::string text;
  size_t max = 0;
  bool too_big = false;
};
size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* b = static_cast<Body*>(user);
  if (b->text.size() + size * n > b->max) {
    b->too_big = true;
    return 0; // aborts the transfer
  }
  b->text.append(data, size * n);
  return size * n;
}
} // namespace

std::optional<std::string> KubeletPodNames::fetch(std::string& error) const {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* h = curl_easy_init();
  if (!h) {
    error = lazy::curl().available() ? "libcurl could not start a transfer" : lazy::curl().error();
    return std::nullopt;
  }
  char errbuf[CURL_ERROR_SIZE] = {};
  Body body;
  body.max = opts_.max_body_bytes;
  curl_slist* headers = nullptr;
  if (!opts_.token_file.empty()) {
    std::string token;
    if (!read_small_file(opts_.token_file, token)) {
      curl_easy_cleanup(h);
      error = fmt::format("cannot read the token file {}", opts_.token_file);
      return std::nullopt;
    }
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
      token.pop_back();
    headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  }
  curl_easy_setopt(h, CURLOPT_URL, opts_.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(opts_.timeout.count()));
  curl_easy_setopt(h, CURLOPT_USERAGENT, "wattscope-kubelet");
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, ""); // gzip where the kubelet offers it
  if (!opts_.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, opts_.ca_file.c_str());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  const CURLcode rc = curl_easy_perform(h);
  curl_easy_cleanup(h);
  curl_slist_free_all(headers);
  if (body.too_big) {
    error = fmt::format("the answer is larger than {} bytes", opts_.max_body_bytes);
    return std::nullopt;
  }
  if (rc != CURLE_OK) {
    error = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
    return std::nullopt;
  }
  return std::move(body.text);
}

} // namespace wattscope
