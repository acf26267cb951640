#include "server/web_assets.h"

#include <algorithm>
#include <cstddef>

// The table itself is generated at build time by scripts/embed_web_assets.py
// from web/* and the Debian browser libraries (see CMakeLists.txt), sorted by
// path, into <build>/generated/web_assets_data.cpp.
namespace shoal::web_assets_detail {
extern const WebAsset kAssets[];
extern const std::size_t kAssetCount;
}  // namespace shoal::web_assets_detail

namespace shoal {

const WebAsset* find_web_asset(std::string_view path) {
  using web_assets_detail::kAssetCount;
  using web_assets_detail::kAssets;
  // Tolerate a query string or a trailing slash ("/cluster/", "/?x=1").
  if (auto q = path.find_first_of("?#"); q != std::string_view::npos) path = path.substr(0, q);
  if (path.empty()) path = "/";
  if (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  if (path == "/index.html") path = "/";
  if (path == "/cluster.html") path = "/cluster";
  const WebAsset* end = kAssets + kAssetCount;
  const WebAsset* it = std::lower_bound(kAssets, end, path,
                                        [](const WebAsset& a, std::string_view p) { return a.path < p; });
  if (it != end && it->path == path) return it;
  return nullptr;
}

}  // namespace shoal
