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

std::string make_beacon(const std::string& key, const std::string& host, int tcp_port, const std::string& worker_id,
                        int64_t now_ms) {
  unsigned char id[16];
  RAND_bytes(id, sizeof(id));
  const std::string body = nlohmann::json{{"shoal", "worker"}, {"host", host},        {"port", tcp_port},
                                          {"worker", worker_id}, {"t", now_ms},     {"id", to_hex(id, sizeof(id))}}
                               .dump();
  return body + "\n" + tag_of(key, body);
}

std::optional<BeaconInfo> BeaconVerifier::verify(const std::string& datagram, const std::string& source,
                                                 int64_t now_ms) {
  const size_t nl = datagram.rfind('\n');
  if (nl == std::string::npos || datagram.size() > 1024) return std::nullopt;
  const std::string body = datagram.substr(0, nl), tag = datagram.substr(nl + 1);
  const std::string expected = tag_of(key_, body);
  if (tag.size() != expected.size() || CRYPTO_memcmp(tag.data(), expected.data(), tag.size()) != 0)
    return std::nullopt;  // another key, or altered
  auto j = nlohmann::json::parse(body, nullptr, false);
  auto is_text = [&](const char* k) { return j.contains(k) && j[k].is_string(); };
  auto is_int = [&](const char* k) { return j.contains(k) && j[k].is_number_integer(); };
  if (!j.is_object() || !is_int("port") || !is_int("t") || !is_text("id") || !is_text("host") || !is_text("worker"))
    return std::nullopt;
  if (j["host"].get<std::string>() != source) return std::nullopt;  // replayed from elsewhere
  const int64_t t = j["t"].get<int64_t>();
  const int64_t port = j["port"].get<int64_t>();
  if (std::llabs(now_ms - t) > kBeaconMaxAgeMs || port <= 0 || port > 65535) return std::nullopt;  // stale
  std::erase_if(seen_, [&](const auto& kv) { return std::llabs(now_ms - kv.second) > kBeaconMaxAgeMs; });
  if (!seen_.emplace(j["id"].get<std::string>(), t).second) return std::nullopt;  // replayed
  return BeaconInfo{static_cast<int>(port), j["worker"].get<std::string>()};
}

}  // namespace shoal::wire
