#pragma once
// The web UI (web/ plus the browser libraries from Debian's packages),
// embedded into the binary at build time: no CDN, no npm, no files to ship.
#include <string_view>

namespace shoal {

struct WebAsset {
  std::string_view path;          // URL path: "/", "/cluster", "/static/app.js", "/static/vendor/marked.min.js"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view body;
};

// The asset served at `path`, or nullptr.
const WebAsset* find_web_asset(std::string_view path);

}  // namespace shoal
