// The Content-Security-Policy of every page serve sends (the dashboard, the runs pages, a run's report, the compare
// view): scripts only from serve itself or inline ones whose SHA-256 the policy lists, no plugins, no framing, no
// form posting elsewhere, requests only back to serve. A value a store or a user wrote that slipped past escaping
// into a page still cannot run, load or send anything: the browser refuses what the policy does not name.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace wattscope {

// SHA-256 (FIPS 180-4) of `data`: the digest, and the digest in base64 as CSP hash sources take it.
std::array<uint8_t, 32> sha256(std::string_view data);
std::string sha256_base64(std::string_view data);

// The policy for `html`: every inline <script> element's text hashed into script-src ('sha256-...'), scripts with a
// src allowed from 'self'. Styles stay 'unsafe-inline': plotly.js sets style attributes and adds <style> rules as it
// draws, and the pages write style="width:..%" bars; a style can show but not run anything.
std::string content_security_policy(std::string_view html);

} // namespace wattscope
