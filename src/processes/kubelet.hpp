// Kubernetes pod names for the "pod <uid>" units (issue 18). The cgroup path gives only a pod's uid; its namespace
// and name come from the kubelet's own list of the pods on this node (GET /pods, on the read-only port 10255 or a URL
// given by WATTSCOPE_KUBELET_URL). The list is fetched on a thread of its own, only when a pod uid is seen that the
// cache does not know, and at most once per `min_refresh`: a lookup never waits on the network, and a node without
// pods never starts the thread. Where the kubelet does not answer, pods stay named by uid and the log says so once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "core/processes.hpp"

namespace wattscope {

// The uid → (namespace, name) of every pod in a kubelet /pods answer (a v1 PodList). Throws std::runtime_error naming
// what is wrong when the text is no PodList; items without a uid, namespace or name are skipped.
std::map<std::string, PodName> parse_kubelet_pods(std::string_view json_text);

struct KubeletOptions {
  // http://HOST:10255/pods (the read-only port), or https://HOST:10250/pods with token_file.
  std::string url = "http://127.0.0.1:10255/pods";
  std::string token_file; // sent as "Authorization: Bearer", read at each fetch (service-account tokens rotate)
  std::string ca_file;    // the kubelet's serving CA for https; empty: the system's
  std::chrono::milliseconds timeout{3000};
  std::chrono::milliseconds min_refresh{30000}; // a miss fetches again no sooner than this after the last fetch
  size_t max_body_bytes = 64u << 20;            // a node's pod list is well under this (110 pods: about 1 MB)
};

// The options from the environment: WATTSCOPE_KUBELET_URL (a URL, or "off"), WATTSCOPE_KUBELET_TOKEN_FILE,
// WATTSCOPE_KUBELET_CA_FILE. nullopt when WATTSCOPE_KUBELET_URL is "off".
std::optional<KubeletOptions> kubelet_options_from_env();

class KubeletPodNames {
public:
  explicit KubeletPodNames(KubeletOptions opts);
  ~KubeletPodNames();
  KubeletPodNames(const KubeletPodNames&) = delete;
  KubeletPodNames& operator=(const KubeletPodNames&) = delete;

  // The pod's names when the latest answer listed it; otherwise nullopt, and a fetch is asked for (on the thread,
  // started at the first call) unless one was made less than min_refresh ago. Never blocks on the network.
  std::optional<PodName> find(const std::string& uid);
  // Counters for tests and doctor: answers parsed, fetches that failed, and the latest failure.
  struct Stats {
    size_t fetches_ok = 0, fetches_failed = 0;
    std::string last_error;
  };
  Stats stats() const;

private:
  void loop();
  // One GET; the body, or nullopt with `error` set.
  std::optional<std::string> fetch(std::string& error) const;

  KubeletOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, PodName> pods_;
  bool wanted_ = false, stop_ = false, started_ = false, said_failure_ = false;
  std::chrono::steady_clock::time_point last_fetch_{};
  bool fetched_once_ = false;
  Stats stats_;
  std::thread thread_;
};

} // namespace wattscope
