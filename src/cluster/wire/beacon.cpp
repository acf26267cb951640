#include "cluster/wire/beacon.h"

#include "cluster/wire/keyed_hash.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <nlohmann/json.hpp>

#include <cstdlib>

namespace shoal::wire {
namespace {

std::string tag_of(const std::string& key, const std::string& body) {
  return hmac_sha256_hex(key, "shoal beacon|" + body);
}

}  // namespace

std::string make_beacon(const std::string& key, int tcp_port, int64_t now_ms) {
  unsigned char id[16];
  RAND_bytes(id, sizeof(id));
  const std::string body =
      nlohmann::json{{"shoal", "worker"}, {"port", tcp_port}, {"t", now_ms}, {"id", to_hex(id, sizeof(id))}}.dump();
  return body + "\n" + tag_of(key, body);
}

std::optional<int> BeaconVerifier::verify(const std::string& datagram, int64_t now_ms) {
  const size_t nl = datagram.rfind('\n');
  if (nl == std::string::npos || datagram.size() > 1024) return std::nullopt;
  const std::string body = datagram.substr(0, nl), tag = datagram.substr(nl + 1);
  const std::string expected = tag_of(key_, body);
  if (tag.size() != expected.size() || CRYPTO_memcmp(tag.data(), expected.data(), tag.size()) != 0)
    return std::nullopt;  // another key, or altered
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("port") || !j["port"].is_number_integer() || !j.contains("t") ||
      !j["t"].is_number_integer() || !j.contains("id") || !j["id"].is_string())
    return std::nullopt;
  const int64_t t = j["t"].get<int64_t>();
  const int port = j["port"].get<int>();
  if (std::llabs(now_ms - t) > kBeaconMaxAgeMs || port <= 0 || port > 65535) return std::nullopt;  // stale
  std::erase_if(seen_, [&](const auto& kv) { return std::llabs(now_ms - kv.second) > kBeaconMaxAgeMs; });
  if (!seen_.emplace(j["id"].get<std::string>(), t).second) return std::nullopt;  // replayed
  return port;
}

}  // namespace shoal::wire
