#include "cluster/primary/worker_client.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "cluster/wire/handshake.h"
#include "util/log.h"
#include "cluster/wire/model_config_json.h"
#include "gguf/reader.h"
#include "model/weights.h"

namespace shoal {

using wire::MessageType;

namespace {
constexpr size_t kChunkBytes = 8u << 20;  // one TENSOR_DATA frame
}

ContentHash TensorHashes::get(const std::string& name) {
  auto it = hashes_.find(name);
  if (it != hashes_.end()) return it->second;
  const gguf::TensorInfo& t = file_.tensor(name);
  return hashes_[name] = hash_bytes(t.data, t.bytes);
}

WorkerClient::WorkerClient(const std::string& address, const LinkOptions& link)
    : address_(address), timeout_ms_(link.timeout_ms) {
  conn_ = wire::Connection::connect(address, std::min(timeout_ms_, 5000));
  conn_->set_timeout(timeout_ms_);
  nlohmann::json hello =
      wire::client_handshake(*conn_, wire::Role::Primary, link.key, {}, link.insecure, timeout_ms_);
  try {
    const auto& d = hello.at("device");
    device_.address = address;
    device_.backend = d.at("backend").get<std::string>();
    device_.kind = d.value("kind", "cpu");  // workers before the Vulkan backend ran on the CPU
    device_.simd = d.value("simd", "");
    device_.total_memory = d.at("total_memory").get<uint64_t>();
    device_.free_memory = d.at("free_memory").get<uint64_t>();
    device_.threads = d.at("threads").get<int>();
    device_.matvec_gbps = d.at("matvec_gbps").get<double>();
    device_.matmul_gflops = d.at("matmul_gflops").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw wire::ProtocolError(wire::ErrorCode::Malformed, fmt::format("{}: bad device report: {}", address, e.what()));
  }
  device_.rtt_ms = ping_ms();
  // A worker from before LINK_PROBE leaves the link unknown (the planner assumes 1 GB/s).
  const auto caps = hello.value("capabilities", nlohmann::json::array());
  auto has = [&](const char* c) { return caps.is_array() && std::find(caps.begin(), caps.end(), c) != caps.end(); };
  if (has("link-probe")) device_.link_gbps = measure_link_gbps();
  can_probe_ = has("probe");
  takes_rows_out_ = has("rows-out");
}

nlohmann::json WorkerClient::request(MessageType type, const nlohmann::json& body, MessageType reply) {
  std::lock_guard<std::mutex> lease(io_);
  const uint64_t id = next_request_id();
  conn_->send_json(type, id, body);
  wire::Frame frame;
  conn_->expect_reply(frame, reply, id, timeout_ms_);
  return wire::parse_json(frame);
}

double WorkerClient::ping_ms() {
  // The median of a few round trips: what a step pays, the worker's wake-up
  // and frame handling included; one lucky or unlucky trip does not decide.
  std::array<double, 5> ms;
  for (size_t i = 0; i < ms.size(); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    request(MessageType::Ping, {{"t", i}}, MessageType::Pong);
    ms[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

double WorkerClient::measure_link_gbps() {
  // kLinkProbeBytes there and back (LINK_PROBE, echoed), less a plain round
  // trip: what the link moves per second (a long prompt's hidden states
  // ride on it). The best of two.
  constexpr size_t kLinkProbeBytes = 512 << 10;
  const std::vector<uint8_t> bytes(kLinkProbeBytes, 0x5A);
  const std::span<const uint8_t> part(bytes);
  double best = 1e9;
  for (int i = 0; i < 2; ++i) {
    std::lock_guard<std::mutex> lease(io_);
    const uint64_t id = next_request_id();
    auto t0 = std::chrono::steady_clock::now();
    conn_->send(MessageType::LinkProbe, id, std::span<const std::span<const uint8_t>>(&part, 1));
    wire::Frame frame;
    conn_->expect_reply(frame, MessageType::LinkProbeEcho, id, timeout_ms_);
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (frame.payload.size() != kLinkProbeBytes)
      throw wire::ProtocolError(wire::ErrorCode::Malformed,
                                fmt::format("{}: link probe echoed {} bytes of {}", address_, frame.payload.size(),
                                            kLinkProbeBytes));
  }
  // Loopback moves it faster than a clock tick resolves: cap at 100 GB/s.
  const double transfer_ms = std::max(best - device_.rtt_ms, 2.0 * kLinkProbeBytes / 100e9 * 1e3);
  return 2.0 * kLinkProbeBytes / (transfer_ms * 1e-3) / 1e9;
}

void WorkerClient::probe(const ProbeShape& shape) {
  if (!can_probe_ || probed_ == shape) return;
  nlohmann::json matrices = nlohmann::json::array();
  for (const ProbeMatrix& m : shape.matrices) matrices.push_back({static_cast<uint32_t>(m.type), m.rows, m.cols});
  try {
    const nlohmann::json r =
        request(MessageType::Probe, {{"type", static_cast<uint32_t>(shape.type)}, {"cols", shape.cols}, {"matrices", matrices}},
                MessageType::ProbeResult);
    const double gbps = r.at("matvec_gbps").get<double>(), gflops = r.at("matmul_gflops").get<double>();
    std::lock_guard<std::mutex> lock(device_mutex_);
    device_.matvec_gbps = gbps;
    device_.matmul_gflops = gflops;
    // A worker from before the matrices timed the dominant type alone.
    device_.probe = r.contains("probe") && r["probe"].is_string() ? r["probe"].get<std::string>()
                                                                  : ProbeShape{shape.type, shape.cols, {}}.name();
    probed_ = shape;
  } catch (const std::exception& e) {
    spdlog::warn("{}: probe on {} failed, keeping its earlier figures: {}", address_, shape.name(), e.what());
  }
}

nlohmann::json WorkerClient::stats() { return request(MessageType::Stats, nlohmann::json::object(), MessageType::StatsReply); }

void WorkerClient::kv_op(const nlohmann::json& op) { request(MessageType::KvOp, op, MessageType::KvOk); }

LayerCache WorkerClient::read_cache(uint32_t stage_id, int seq, int layer) {
  std::lock_guard<std::mutex> lease(io_);
  const uint64_t id = next_request_id();
  conn_->send_json(MessageType::CacheRead, id, {{"stage", stage_id}, {"seq", seq}, {"layer", layer}});
  wire::Frame frame;
  conn_->expect_reply(frame, MessageType::CacheRows, id, timeout_ms_);
  uint32_t length = 0;
  if (frame.payload.size() < 4)
    throw wire::ProtocolError(wire::ErrorCode::Malformed, fmt::format("{} sent a CACHE_ROWS of {} bytes", address_,
                                                          frame.payload.size()));
  std::memcpy(&length, frame.payload.data(), 4);
  return {static_cast<int>(std::min<uint32_t>(length, INT32_MAX)), {frame.payload.begin() + 4, frame.payload.end()}};
}

void WorkerClient::write_cache(uint32_t stage_id, int seq, int layer, const LayerCache& cache) {
  const uint32_t head[4] = {stage_id, static_cast<uint32_t>(seq), static_cast<uint32_t>(layer),
                            static_cast<uint32_t>(cache.length)};
  std::lock_guard<std::mutex> lease(io_);
  const uint64_t id = next_request_id();
  const std::span<const uint8_t> parts[] = {{reinterpret_cast<const uint8_t*>(head), sizeof(head)}, cache.bytes};
  conn_->send(MessageType::CacheWrite, id, parts);
  wire::Frame frame;
  conn_->expect_reply(frame, MessageType::KvOk, id, timeout_ms_);
}

void WorkerClient::copy_cache(uint32_t from_stage, uint32_t to_stage, int seq, int layer) {
  request(MessageType::CacheCopy, {{"from", from_stage}, {"to", to_stage}, {"seq", seq}, {"layer", layer}},
          MessageType::KvOk);
}

void WorkerClient::unload(uint32_t stage_id) {
  request(MessageType::Unload, {{"stage", stage_id}}, MessageType::UnloadOk);
}

double WorkerClient::link_group(uint32_t stage_id) {
  return request(MessageType::GroupLink, {{"stage", stage_id}}, MessageType::GroupLinked).value("ms", 0.0);
}

StageLoadReport WorkerClient::load_stage(const gguf::File& file, TensorHashes& hashes, const ModelConfig& config,
                                         int begin, int end, int n_seq, int n_ctx, int max_tokens, int rewind_rows,
                                         KvTypes kv_types,
                                         const std::vector<std::string>& members,
                                         const std::function<void(uint64_t, uint64_t)>& progress,
                                         const nlohmann::json& group, bool head) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> names = tensor_names_for(config, BindRange{begin, end, head, false});
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& name : names) {
    const gguf::TensorInfo& t = file.tensor(name);
    tensors.push_back({{"name", name},
                       {"type", static_cast<uint32_t>(t.type)},
                       {"shape", t.shape},
                       {"hash", hashes.get(name).hex()},
                       {"bytes", t.bytes}});
  }
  std::lock_guard<std::mutex> lease(io_);
  const uint64_t id = next_request_id();
  nlohmann::json body = {{"config", wire::config_to_json(config)},
                    {"layer_begin", begin},
                    {"layer_end", end},
                    {"n_seq", n_seq},
                    {"n_ctx", n_ctx},
                    {"max_tokens", max_tokens},
                    {"rewind_rows", rewind_rows},
                    {"kv_type_k", kv_type_name(kv_types.k)},
                    {"kv_type_v", kv_type_name(kv_types.v)},
                    {"tensors", tensors},
                    {"members", members}};
  if (!group.is_null()) body["group"] = group;  // a tensor group member: {id, rank, members, weights}
  if (head) body["head"] = true;
  conn_->send_json(MessageType::LoadStage, id, body);
  // The worker looks through its cache and models dir meanwhile; it sends
  // HEARTBEATs, so a slow disk is not mistaken for a lost worker.
  wire::Frame frame;
  conn_->expect_reply(frame, MessageType::LoadNeeds, id, timeout_ms_);
  nlohmann::json needs = wire::parse_json(frame);

  StageLoadReport report;
  std::vector<size_t> missing = needs.at("missing").get<std::vector<size_t>>();
  // A tensor group member asks for its rows only of the tensors the group
  // divides ("rows": index -> [begin, end)); it checks them against the hash
  // LOAD_COMMIT gives for each.
  const nlohmann::json rows = needs.value("rows", nlohmann::json::object());
  std::vector<std::span<const uint8_t>> wanted;
  uint64_t total = 0;
  for (size_t i : missing) {
    if (i >= names.size()) throw wire::ProtocolError(wire::ErrorCode::Malformed, "LOAD_NEEDS names an unknown tensor");
    const gguf::TensorInfo& t = file.tensor(names[i]);
    std::span<const uint8_t> bytes(t.data, t.bytes);
    if (auto r = rows.find(std::to_string(i)); r != rows.end()) {
      const auto [begin, end] = r->get<std::pair<int64_t, int64_t>>();
      if (begin < 0 || end <= begin || end > t.n_rows())
        throw wire::ProtocolError(wire::ErrorCode::Malformed,
                                  fmt::format("LOAD_NEEDS asks for rows {}-{} of '{}', which has {}", begin, end,
                                              names[i], t.n_rows()));
      const size_t row_bytes = t.bytes / static_cast<size_t>(t.n_rows());
      bytes = bytes.subspan(static_cast<size_t>(begin) * row_bytes, static_cast<size_t>(end - begin) * row_bytes);
    }
    wanted.push_back(bytes);
    total += bytes.size();
  }
  nlohmann::json share_hashes = nlohmann::json::object();
  for (size_t n = 0; n < missing.size(); ++n) {
    const std::span<const uint8_t> bytes = wanted[n];
    const uint32_t index = static_cast<uint32_t>(missing[n]);
    if (rows.contains(std::to_string(index))) share_hashes[std::to_string(index)] = hash_bytes(bytes.data(), bytes.size()).hex();
    for (uint64_t offset = 0; offset < bytes.size(); offset += kChunkBytes) {
      const size_t len = std::min<uint64_t>(kChunkBytes, bytes.size() - offset);
      uint8_t head[16] = {};
      std::memcpy(head, &index, 4);
      std::memcpy(head + 8, &offset, 8);
      const std::span<const uint8_t> parts[] = {{head, 16}, bytes.subspan(offset, len)};
      conn_->send(MessageType::TensorData, id, parts);
      report.sent_bytes += len;
      if (progress) progress(report.sent_bytes, total);
    }
  }
  report.tensors_sent = static_cast<int>(missing.size());
  conn_->send_json(MessageType::LoadCommit, id, {{"shares", share_hashes}});
  conn_->expect_reply(frame, MessageType::StageReady, id, timeout_ms_);
  nlohmann::json ready = wire::parse_json(frame);
  report.stage_id = ready.at("stage_id").get<uint32_t>();
  report.weight_bytes = ready.at("weight_bytes").get<uint64_t>();
  report.kv_bytes = ready.at("kv_bytes").get<uint64_t>();
  report.from_cache = ready.at("from_cache").get<int>();
  report.from_memory = ready.value("from_memory", 0);
  report.from_models_dir = ready.at("from_models_dir").get<int>();
  report.free_after = ready.at("free_after").get<uint64_t>();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace shoal
