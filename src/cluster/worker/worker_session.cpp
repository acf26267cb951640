#include "cluster/worker/worker_session.h"

#include "tensor/random_weights.h"

#include <atomic>

#include "cluster/wire/handshake.h"
#include "engine/output_head.h"
#include "engine/pipeline.h"
#include "model/travelling_rows.h"
#include "util/log.h"

namespace shoal {

using wire::ErrorCode;
using wire::MessageType;
using wire::ProtocolError;

namespace {
// Moves a connection from the handshake count to the session count, and
// out of both when it ends, however it ends.
class SessionSlot {
 public:
  SessionSlot(std::atomic<int>& handshakes, std::atomic<int>& sessions) : h_(handshakes), s_(sessions) {}
  ~SessionSlot() { authenticated_ ? --s_ : --h_; }
  void authenticated() {
    ++s_;
    --h_;
    authenticated_ = true;
  }

 private:
  std::atomic<int>& h_;
  std::atomic<int>& s_;
  bool authenticated_ = false;
};

// A PROBE's body: {type, cols, matrices: [[type, rows, cols], ...]};
// matrices came later and may be missing (then the dominant type alone).
ProbeShape probe_shape_from(const nlohmann::json& body) {
  auto integer = [](const nlohmann::json& v, const char* what) {
    if (!v.is_number_integer()) fail("{} must be an integer, got {}", what, v.dump());
    return v.get<int64_t>();
  };
  auto type = [&](const nlohmann::json& v) {
    // check_probe_shape says whether it is a weight type.
    const int64_t id = integer(v, "a weight type id");
    if (id < 0 || id > 0xFFFF) fail("{} is not a weight type id", id);
    return static_cast<DType>(id);
  };
  if (!body.is_object() || !body.contains("type")) fail("needs a weight type id");
  ProbeShape shape;
  shape.type = type(body["type"]);
  if (body.contains("cols")) shape.cols = integer(body["cols"], "cols");
  if (body.contains("matrices")) {
    const nlohmann::json& list = body["matrices"];
    if (!list.is_array() || list.size() > kMaxProbeMatrices)
      fail("matrices must be a list of at most {} [type, rows, cols]", kMaxProbeMatrices);
    for (const nlohmann::json& m : list) {
      if (!m.is_array() || m.size() != 3) fail("a matrix is [type, rows, cols], got {}", m.dump());
      shape.matrices.push_back({type(m[0]), integer(m[1], "rows"), integer(m[2], "cols")});
    }
  }
  check_probe_shape(shape);
  return shape;
}
}  // namespace

// How long a second primary waits for the first to be noticed gone.
constexpr std::chrono::milliseconds kPrimaryHandover{1500};

void WorkerSession::run() {
  SessionSlot slot(s_.handshakes_, s_.sessions_);
  try {
    nlohmann::json hello = wire::server_handshake(*conn_, s_.options_.key, s_.hello_info(), s_.options_.timeout_ms,
                                                    s_.options_.plain_frames);
    slot.authenticated();
    s_.authenticated(conn_.get());
    is_primary_ = hello.value("role", "") == "primary";
    if (is_primary_) {
      std::unique_lock<std::mutex> lock(s_.mutex_);
      // A primary that just exited may not have been noticed yet (its
      // session still reading the closed socket, or freeing its stages): a
      // new one waits a moment for that before it is told "busy".
      s_.primary_left_.wait_for(lock, kPrimaryHandover, [&] { return !s_.primary_active_; });
      if (s_.primary_active_) {
        ++s_.stats_.refused;
        conn_->send_error(ErrorCode::Busy,
                          fmt::format("worker busy: it serves the primary at {} already", s_.primary_peer_));
        spdlog::warn("refused a second primary from {}: busy", conn_->peer());
        return;
      }
      s_.primary_active_ = true;
      s_.primary_peer_ = conn_->peer();
      s_.primary_conn_ = conn_;
    }
    if (is_primary_) s_.keep_alive(conn_);
    spdlog::info("{} {} connected", hello.value("role", "?"), conn_->peer());
    serve();
  } catch (const ProtocolError& e) {
    ++s_.stats_.refused;
    spdlog::warn("{}", e.what());
    // The ERROR that names the fault is out: let it arrive before we go
    // (an unread rest of the peer's garbage would otherwise reset it away).
    conn_->linger(std::chrono::milliseconds(1000));
  } catch (const wire::LinkError& e) {
    if (e.kind() == wire::LinkError::Kind::Timeout) ++s_.stats_.timed_out;
    spdlog::info("{}", e.what());
  } catch (const std::exception& e) {
    spdlog::info("{}: {}", conn_->peer(), e.what());
  }
  if (is_primary_) {
    release_stages();
    std::lock_guard<std::mutex> lock(s_.mutex_);
    s_.primary_active_ = false;
    s_.primary_conn_.reset();
    s_.next_hops_.clear();
    s_.chain_members_.clear();
    s_.primary_left_.notify_all();
    spdlog::info("primary {} left; stages freed, waiting for the next", conn_->peer());
  }
}

void WorkerSession::serve() {
  wire::Frame frame;
  for (;;) {
    // Blocks in poll/recv while the primary thinks (no spinning), but not
    // for ever: an idle primary sends HEARTBEATs, so silence means it is gone.
    conn_->receive(frame, s_.options_.timeout_ms);
    try {
      handle(frame);
      if (handed_over_) return;
    } catch (const ProtocolError& e) {
      conn_->send_error(e.code(), e.what(), frame.header.request_id);
      if (e.code() == ErrorCode::Malformed) throw;  // the stream cannot be trusted any more
    } catch (const nlohmann::json::exception& e) {
      conn_->send_error(ErrorCode::Malformed, e.what(), frame.header.request_id);
      throw ProtocolError(ErrorCode::Malformed, fmt::format("{} sent a malformed request: {}", conn_->peer(), e.what()));
    } catch (const Error& e) {
      conn_->send_error(ErrorCode::BadRequest, e.what(), frame.header.request_id);  // the session goes on
    }
  }
}

void WorkerSession::handle(wire::Frame& frame) {
  const uint64_t id = frame.header.request_id;
  // A peer (a chain neighbour, or a monitor) reads; only the primary changes anything.
  if (!is_primary_ && frame.type() != MessageType::Forward && frame.type() != MessageType::Ping &&
      frame.type() != MessageType::Stats && frame.type() != MessageType::TensorLink)
    throw ProtocolError(ErrorCode::Malformed,
                        fmt::format("a peer may only send FORWARD, PING, STATS or TENSOR_LINK, not {}",
                                    wire::message_name(frame.type())));
  if (is_primary_ && frame.type() == MessageType::TensorLink)
    throw ProtocolError(ErrorCode::Malformed, "TENSOR_LINK comes from a tensor group's member, not the primary");
  switch (frame.type()) {
    case MessageType::Ping: conn_->send_json(MessageType::Pong, id, wire::parse_json(frame)); return;
    case MessageType::LinkProbe: {
      const std::span<const uint8_t> part(frame.payload);
      conn_->send(MessageType::LinkProbeEcho, id, std::span<const std::span<const uint8_t>>(&part, 1));
      return;
    }
    case MessageType::Stats: conn_->send_json(MessageType::StatsReply, id, s_.stats_json()); return;
    case MessageType::Probe: probe(frame); return;
    case MessageType::LoadStage: load_stage(frame); return;
    case MessageType::Forward: forward(frame); return;
    case MessageType::KvOp: kv_op(frame); return;
    case MessageType::CacheRead: cache_read(frame); return;
    case MessageType::CacheWrite: cache_write(frame); return;
    case MessageType::CacheCopy: cache_copy(frame); return;
    case MessageType::Unload: unload(frame); return;
    case MessageType::TensorLink: tensor_link(frame); return;
    case MessageType::GroupLink: group_link(frame); return;
    default:
      throw ProtocolError(ErrorCode::Malformed,
                          fmt::format("unexpected {} from {}", wire::message_name(frame.type()), conn_->peer()));
  }
}

void WorkerSession::probe(const wire::Frame& request) {
  const nlohmann::json body = wire::parse_json(request);
  ProbeShape shape;
  try {
    shape = probe_shape_from(body);
  } catch (const std::exception& e) {
    throw ProtocolError(ErrorCode::BadRequest, fmt::format("{} (PROBE {})", e.what(),
                                    body.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace).substr(0, 200)));
  }
  DeviceInfo d = s_.device_;
  // The probe times the CPU's kernels: a GPU worker's speed stays unknown.
  if (d.kind == "cpu") {
    // Not while a stage computes: they would time each other.
    std::lock_guard<std::mutex> compute(s_.compute_mutex_);
    d = probe_local_cpu(*s_.pool_, shape);
  }
  conn_->send_json(MessageType::ProbeResult, request.header.request_id,
                   {{"type", dtype_info(shape.type).name},
                    {"probe", d.probe},
                    {"matvec_gbps", d.matvec_gbps},
                    {"matmul_gflops", d.matmul_gflops}});
}

std::shared_ptr<WorkerStage> WorkerSession::find_stage(uint32_t id) {
  std::lock_guard<std::mutex> lock(s_.mutex_);
  auto it = s_.stages_.find(id);
  if (it == s_.stages_.end()) throw ProtocolError(ErrorCode::UnknownStage, fmt::format("no stage {} here", id));
  return it->second;
}

void WorkerSession::forward(const wire::Frame& request) {
  const uint64_t id = request.header.request_id;
  wire::ForwardView view = wire::decode_forward(request.payload, positions_, seq_ids_, rows_out_);
  if (!is_primary_) {
    // A tensor group's members step together, each told by the primary: a
    // step from anyone else would set this one's exchanges apart from
    // theirs. Refused to the sender (a chain step's failure goes to the primary).
    std::lock_guard<std::mutex> lock(s_.mutex_);
    auto it = s_.stages_.find(view.header.stage_id);
    if (it != s_.stages_.end() && it->second->exchange)
      throw ProtocolError(ErrorCode::BadRequest, fmt::format("stage {} is a tensor group member's: only its primary "
                                                             "sends it FORWARD", it->first));
  }
  try {
    auto stage = find_stage(view.header.stage_id);
    const int n = static_cast<int>(view.header.n_tokens), width = stage->config.activation_width();
    if (static_cast<int>(view.header.n_embd) != width)
      throw ProtocolError(ErrorCode::BadRequest,
                          fmt::format("FORWARD rows are {} wide, stage {} expects {}", view.header.n_embd, stage->id, width));
    if (view.has_rows_out && view.route.empty() && stage->stage->layer_end() != stage->config.n_layer)
      throw ProtocolError(ErrorCode::BadRequest,
                          fmt::format("FORWARD lists rows out, but stage {} (layers {}-{}) does not end the model",
                                      stage->id, stage->stage->layer_begin(), stage->stage->layer_end() - 1));
    if (view.logits && (!stage->head || !view.route.empty()))
      throw ProtocolError(ErrorCode::BadRequest,
                          fmt::format("FORWARD asks for logits, but stage {} does not hold the output head", stage->id));
    if (view.logits && view.rows_out.size() * stage->config.n_vocab * sizeof(float) > Pipeline::kMaxStageLogitsBytes)
      throw ProtocolError(ErrorCode::BadRequest,
                          fmt::format("FORWARD asks for the logits of {} rows: over {} MiB", view.rows_out.size(),
                                      Pipeline::kMaxStageLogitsBytes >> 20));
    hidden_.resize(static_cast<size_t>(n) * width);
    wire::decode_activations(view.header.dtype, view.activations.data(), n, width, hidden_.data());
    // A row "wants logits" when it is read after the model's last layer:
    // every row unless the primary listed them (Stage::forward).
    batch_.clear();
    for (int t = 0; t < n; ++t) batch_.add(0, positions_[t], seq_ids_[t], !view.has_rows_out);
    for (int32_t t : view.rows_out) batch_.logits[t] = 1;
    {
      std::lock_guard<std::mutex> run(stage->run_mutex);
      std::lock_guard<std::mutex> compute(s_.compute_mutex_);
      stage->stage->forward(batch_, hidden_.data());
      if (view.logits) run_head(*stage, view.rows_out);  // a group's members all run it: its matmul trades rows
    }
    ++s_.stats_.forwards;
    s_.stats_.forward_rows += n;
    send_on(id, view, stage);
  } catch (const Error& e) {
    if (is_primary_) throw;
    // A chain peer's request failed: the primary waits for this step, so it is told.
    spdlog::warn("chain step from {} failed: {}", conn_->peer(), e.what());
    std::shared_ptr<wire::Connection> primary;
    {
      std::lock_guard<std::mutex> lock(s_.mutex_);
      primary = s_.primary_conn_;
    }
    if (primary) primary->send_error(ErrorCode::BadRequest, fmt::format("chain step failed: {}", e.what()), id);
  }
}

void WorkerSession::send_on(uint64_t request_id, const wire::ForwardView& view,
                            const std::shared_ptr<WorkerStage>& stage) {
  // A tensor group's members all hold the result: the first answers for them.
  if (stage->exchange && stage->exchange->group().rank != 0) return;
  if (view.logits) {  // the rows out's logits, straight back to the primary that asked (checked in forward)
    const int n_out = static_cast<int>(view.rows_out.size());
    wire::encode_result_prefix(n_out, stage->config.n_vocab, wire::WireDType::F32, prefix_);
    const std::span<const uint8_t> parts[] = {
        prefix_, {reinterpret_cast<const uint8_t*>(logits_.data()), logits_.size() * sizeof(float)}};
    conn_->send(MessageType::ForwardResult, request_id, parts);
    s_.stats_.result_rows += n_out;
    return;
  }
  int n = static_cast<int>(view.header.n_tokens);
  int width = stage->config.activation_width();
  if (view.route.empty()) {
    if (view.has_rows_out) {  // only the listed rows were finished, and only they go back
      wire::pack_rows(hidden_.data(), width, view.rows_out);
      n = static_cast<int>(view.rows_out.size());
    }
    // The primary has the per-layer inputs the rows carried: only the residual values go back.
    narrow_rows(hidden_.data(), n, width, stage->config.n_embd);
    width = stage->config.n_embd;
  }
  std::span<const uint8_t> activations;
  if (view.header.dtype == wire::WireDType::F32) {
    activations = {reinterpret_cast<const uint8_t*>(hidden_.data()), static_cast<size_t>(n) * width * sizeof(float)};
  } else {
    wire::encode_activations(view.header.dtype, hidden_.data(), n, width, encoded_);
    activations = encoded_;
  }
  if (view.route.empty()) {
    // The end of the line: back to the primary (directly, or from the chain's last worker).
    wire::encode_result_prefix(n, width, view.header.dtype, prefix_);
    std::shared_ptr<wire::Connection> target = conn_;
    if (!is_primary_) {
      std::lock_guard<std::mutex> lock(s_.mutex_);
      target = s_.primary_conn_;
    }
    if (!target) throw Error("chain result has no primary to go to");
    const std::span<const uint8_t> parts[] = {prefix_, activations};
    target->send(MessageType::ForwardResult, request_id, parts);
    s_.stats_.result_rows += n;
    return;
  }
  wire::ForwardHeader h{view.route[0].stage_id, view.header.n_tokens, view.header.n_embd, view.header.dtype};
  wire::encode_forward_prefix(h, positions_, seq_ids_, view.has_rows_out ? &rows_out_ : nullptr,
                              std::span(view.route).subspan(1), prefix_);
  const std::span<const uint8_t> parts[] = {prefix_, activations};
  {
    // Only to a worker our primary named: a FORWARD cannot make this
    // machine connect to an arbitrary host:port.
    std::lock_guard<std::mutex> lock(s_.mutex_);
    if (!s_.chain_members_.contains(view.route[0].address))
      throw ProtocolError(ErrorCode::BadRequest,
                          fmt::format("FORWARD routes to {}, which is not a member of this worker's cluster",
                                      view.route[0].address));
  }
  try {
    next_hop(view.route[0].address, false)->send(MessageType::Forward, request_id, parts);
  } catch (const ProtocolError&) {
    throw;
  } catch (const Error&) {
    // A cached hop may have gone stale (the next worker restarted): reconnect once.
    next_hop(view.route[0].address, true)->send(MessageType::Forward, request_id, parts);
  }
}

std::shared_ptr<wire::Connection> WorkerSession::next_hop(const std::string& address, bool fresh) {
  {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    auto it = s_.next_hops_.find(address);
    if (it != s_.next_hops_.end() && !fresh) return it->second;
  }
  std::shared_ptr<wire::Connection> conn = wire::Connection::connect(address, s_.options_.timeout_ms);
  conn->set_timeout(s_.options_.timeout_ms);
  wire::client_handshake(*conn, wire::Role::Peer, s_.options_.key, {}, s_.options_.plain_frames, s_.options_.timeout_ms);
  s_.keep_alive(conn);
  std::lock_guard<std::mutex> lock(s_.mutex_);
  s_.next_hops_[address] = conn;
  return conn;
}

void WorkerSession::kv_op(const wire::Frame& request) {
  nlohmann::json body = wire::parse_json(request);
  auto stage = find_stage(body.at("stage").get<uint32_t>());
  const std::string op = body.at("op").get<std::string>();
  {
    std::lock_guard<std::mutex> run(stage->run_mutex);
    if (op == "truncate")
      stage->stage->truncate_sequence(body.at("seq").get<int>(), body.at("n_pos").get<int>());
    else
      throw ProtocolError(ErrorCode::BadRequest, fmt::format("unknown KV operation '{}'", op));
  }
  conn_->send_json(MessageType::KvOk, request.header.request_id, nlohmann::json::object());
}

void WorkerSession::cache_read(const wire::Frame& request) {
  nlohmann::json body = wire::parse_json(request);
  auto stage = find_stage(body.at("stage").get<uint32_t>());
  LayerCache cache;
  {
    std::lock_guard<std::mutex> run(stage->run_mutex);
    cache = stage->stage->read_cache(body.at("seq").get<int>(), body.at("layer").get<int>());
  }
  if (cache.bytes.size() + 4 > conn_->max_payload())
    throw ProtocolError(ErrorCode::BadRequest, fmt::format("a layer's cache of {} MiB is over the frame limit of {} MiB",
                                                           cache.bytes.size() >> 20, conn_->max_payload() >> 20));
  const uint32_t length = static_cast<uint32_t>(cache.length);
  const std::span<const uint8_t> parts[] = {{reinterpret_cast<const uint8_t*>(&length), 4}, cache.bytes};
  conn_->send(MessageType::CacheRows, request.header.request_id, parts);
}

void WorkerSession::cache_write(const wire::Frame& request) {
  const std::vector<uint8_t>& p = request.payload;
  if (p.size() < 16) throw ProtocolError(ErrorCode::Malformed, fmt::format("a CACHE_WRITE of {} bytes", p.size()));
  uint32_t head[4];  // stage, seq, layer, length
  std::memcpy(head, p.data(), sizeof(head));
  auto stage = find_stage(head[0]);
  const LayerCache cache{static_cast<int>(std::min<uint32_t>(head[3], INT32_MAX)), {p.begin() + 16, p.end()}};
  {
    std::lock_guard<std::mutex> run(stage->run_mutex);
    stage->stage->write_cache(static_cast<int>(std::min<uint32_t>(head[1], INT32_MAX)),
                              static_cast<int>(std::min<uint32_t>(head[2], INT32_MAX)), cache);
  }
  conn_->send_json(MessageType::KvOk, request.header.request_id, nlohmann::json::object());
}

void WorkerSession::cache_copy(const wire::Frame& request) {
  nlohmann::json body = wire::parse_json(request);
  auto from = find_stage(body.at("from").get<uint32_t>()), to = find_stage(body.at("to").get<uint32_t>());
  const int seq = body.at("seq").get<int>(), layer = body.at("layer").get<int>();
  if (from == to) throw ProtocolError(ErrorCode::BadRequest, "CACHE_COPY from a stage into itself");
  LayerCache cache;
  {
    std::lock_guard<std::mutex> run(from->run_mutex);
    cache = from->stage->read_cache(seq, layer);
  }
  {
    std::lock_guard<std::mutex> run(to->run_mutex);
    to->stage->write_cache(seq, layer, cache);
  }
  conn_->send_json(MessageType::KvOk, request.header.request_id, nlohmann::json::object());
}

void WorkerSession::unload(const wire::Frame& request) {
  const uint32_t id = wire::parse_json(request).at("stage").get<uint32_t>();
  find_stage(id);
  {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    s_.stages_.erase(id);
  }
  std::erase(owned_, id);
  spdlog::info("stage {}: unloaded", id);
  conn_->send_json(MessageType::UnloadOk, request.header.request_id, nlohmann::json::object());
}

void WorkerSession::tensor_link(const wire::Frame& request) {
  const nlohmann::json body = wire::parse_json(request);
  const std::string group = body.at("group").get<std::string>();
  const int rank = body.at("rank").get<int>();
  std::shared_ptr<PeerExchange> exchange;
  {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    for (const auto& [id, stage] : s_.stages_)
      if (stage->exchange && fmt::format("{:016x}", stage->exchange->group().id) == group) exchange = stage->exchange;
  }
  if (!exchange) throw ProtocolError(ErrorCode::UnknownStage, fmt::format("no tensor group {} here", group));
  exchange->accept_link(rank, conn_);
  handed_over_ = true;
  spdlog::info("tensor group {}: member {} ({}) linked", group, rank, conn_->peer());
}

void WorkerSession::run_head(WorkerStage& stage, std::span<const int32_t> rows_out) {
  const ModelConfig& c = stage.config;
  const int m = static_cast<int>(rows_out.size());
  logits_.resize(static_cast<size_t>(m) * c.n_vocab);
  if (m == 0) return;
  wire::pack_rows(hidden_.data(), c.activation_width(), rows_out);
  narrow_rows(hidden_.data(), m, c.activation_width(), c.n_embd);
  head_positions_.clear();
  head_seq_ids_.clear();
  for (int32_t t : rows_out) {
    head_positions_.push_back(positions_[static_cast<size_t>(t)]);
    head_seq_ids_.push_back(seq_ids_[static_cast<size_t>(t)]);
  }
  Backend& be = *stage.backend;
  auto room = [&](std::unique_ptr<Buffer>& b, size_t bytes) {
    if (!b || b->bytes() < bytes) b = be.allocate(bytes);
    return DevicePtr{b.get(), 0};
  };
  const size_t row_bytes = static_cast<size_t>(m) * c.n_embd * sizeof(float);
  const DevicePtr rows = room(stage.head_rows, row_bytes), logits = room(stage.head_logits, logits_.size() * sizeof(float));
  be.begin_step(head_seq_ids_.data(), head_positions_.data(), m);
  try {
    be.upload(rows, hidden_.data(), row_bytes);
    run_output_head(be, stage.weights, c, rows, logits, m);
    be.download(logits_.data(), logits, logits_.size() * sizeof(float));
    be.finish_step();
  } catch (...) {
    be.abandon_step();
    throw;
  }
}

void WorkerSession::group_link(const wire::Frame& request) {
  const nlohmann::json body = wire::parse_json(request);
  const uint32_t id = body.at("stage").get<uint32_t>();
  const std::shared_ptr<WorkerStage> stage = find_stage(id);
  if (!stage->exchange) throw ProtocolError(ErrorCode::BadRequest, fmt::format("stage {} is not a tensor group's", id));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    stage->exchange->link();
  } catch (const wire::LinkError& e) {
    // The other member's fault, not this link's: said as an answer, the session goes on.
    throw ProtocolError(ErrorCode::Timeout, e.what());
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  conn_->send_json(MessageType::GroupLinked, request.header.request_id, {{"stage", id}, {"ms", ms}});
}

void WorkerSession::release_stages() {
  std::lock_guard<std::mutex> lock(s_.mutex_);
  for (uint32_t id : owned_) s_.stages_.erase(id);
  owned_.clear();
}

}  // namespace shoal
