// libFuzzer: bytes as a client would send them, cut into pieces where the
// first byte says, into RequestReader. Nothing may crash, hang or hold more
// than the limits allow.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/http_request_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = 1 + data[0] % 64;
  shoal::server::RequestReader reader({4096, 32, 4096});
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  while (!rest.empty()) {
    const auto piece = rest.substr(0, step);
    rest.remove_prefix(piece.size());
    const auto state = reader.feed(piece);
    if (state == shoal::server::RequestReader::State::Failed) break;
    if (state == shoal::server::RequestReader::State::Complete) {
      if (reader.request().body.size() > 4096) __builtin_trap();
      std::string leftover = reader.take_leftover();
      reader = shoal::server::RequestReader({4096, 32, 4096});
      if (!leftover.empty() && reader.feed(leftover) == shoal::server::RequestReader::State::Failed) break;
    }
  }
  return 0;
}
