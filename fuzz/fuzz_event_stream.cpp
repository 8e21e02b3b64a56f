// The event stream `top --connect` reads from a serve (issue 16; fuzzed since issue 31): server-sent-event bytes from
// any host a user points it at, cut into blocks, their data lines joined into one /api/v1/current document each,
// applied to the host's view. The stream's framing lives in remote.cpp's own file-local callback, so this program
// compiles remote.cpp into itself to drive the very function libcurl calls, chunk by chunk as the network delivers.
#include "top/remote.cpp"

#include <chrono>

#include "check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wattscope::top;
  if (size == 0) return 0;
  // The first byte picks how the rest arrives: in chunks of 1 to 256 bytes (a block split anywhere).
  const size_t chunk = static_cast<size_t>(data[0]) + 1;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  RemoteHost host(
      RemoteOptions{"http://127.0.0.1:9", "", std::chrono::milliseconds(2000), std::chrono::milliseconds(3000)});
  StreamCtx ctx{&host, {}, false};
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    const size_t n = std::min(chunk, bytes.size() - off);
    const size_t took = on_stream_bytes(bytes.data() + off, 1, n, &ctx);
    if (took != n) {
      FUZZ_CHECK(took == 0 && ctx.too_big); // only an oversized event ends the transfer
      break;
    }
  }
  const HostView v = host.snapshot(std::chrono::steady_clock::now());
  FUZZ_CHECK(v.url == "http://127.0.0.1:9");
  return 0;
}
