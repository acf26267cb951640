#include "cluster/primary/remote_stage.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "util/error.h"

namespace shoal {

using wire::MessageType;

RemoteStage::RemoteStage(std::vector<RemoteMember> members, int n_embd, int side_width, int n_layer,
                         wire::WireDType dtype, Topology topology, int head_vocab)
    : members_(std::move(members)),
      group_(topology == Topology::tensor_group),
      answerer_(group_ ? 0 : members_.size() - 1),
      n_embd_(n_embd),
      row_width_(n_embd + side_width),
      head_vocab_(head_vocab),
      dtype_(dtype) {
  if (members_.empty()) fail("internal: a remote stage needs at least one worker");
  member_ids_.resize(members_.size());
  // Every member passes the list on; a worker from before it would not
  // parse it, so such a chain gets every row back as before.
  sends_rows_out_ = members_.back().layer_end == n_layer &&
                    std::all_of(members_.begin(), members_.end(), [](auto& m) { return m.client->takes_rows_out(); });
  for (size_t i = 1; i < members_.size() && !group_; ++i)
    route_.push_back({members_[i].client->address(), members_[i].stage_id});
  wire::wire_bytes(dtype_, 1, row_width_);  // refuses q8_0 for widths that are not whole blocks
  wire::wire_bytes(dtype_, 1, n_embd_);
  for (auto& m : members_) {
    leases_.emplace_back(m.client->io(), std::defer_lock);
    poll_set_.push_back({m.client->connection().fd(), POLLIN, 0});
  }
}

std::string RemoteStage::describe() const {
  std::string out;
  if (group_) {
    for (const auto& m : members_) out += fmt::format("{}{}", out.empty() ? "" : " + ", m.client->address());
    return fmt::format("{} layers {}-{} (tensor split {} ways)", out, layer_begin(), layer_end() - 1,
                       members_.size());
  }
  for (const auto& m : members_)
    out += fmt::format("{}{} layers {}-{}", out.empty() ? "" : " -> ", m.client->address(), m.layer_begin,
                       m.layer_end - 1);
  return out;
}

std::vector<StageDevice> RemoteStage::devices() const {
  std::vector<StageDevice> out;
  for (const auto& m : members_) {
    const DeviceInfo& d = m.client->device();
    out.push_back({m.client->address(), d.backend, m.layer_begin, m.layer_end, m.load.weight_bytes, m.load.kv_bytes,
                   m.load.free_after, d.rtt_ms, true});
  }
  return out;
}

void RemoteStage::forward(const Batch& batch, float* hidden) {
  submit(batch, hidden);
  collect();
}

void RemoteStage::release_leases() noexcept {
  for (auto& lease : leases_)
    if (lease.owns_lock()) lease.unlock();
}

void RemoteStage::submit(const Batch& batch, float* hidden) {
  float* const wanted_logits = std::exchange(head_into_, nullptr);  // this step's only
  if (pending_id_ != 0) fail("internal: {} got a step while one is pending", describe());
  const int n = batch.size();
  // The keeper thread reads heartbeats on idle links; from here to the end
  // of collect() (or a cancel) the links are ours.
  try {
    for (auto& lease : leases_) lease.lock();
    // The head reads only the rows that want logits: the last worker
    // finishes and returns just those (Stage::forward).
    const bool rows_out = sends_rows_out_ && batch.finished_rows(rows_out_);
    // The logits instead, when asked for this step and the members hold the head.
    float* logits = rows_out && runs_head() ? wanted_logits : nullptr;
    if (wanted_logits && !logits) fail("internal: {} was asked for logits it cannot give", describe());
    std::span<const uint8_t> activations;
    if (dtype_ == wire::WireDType::F32) {
      activations = {reinterpret_cast<const uint8_t*>(hidden), static_cast<size_t>(n) * row_width_ * sizeof(float)};
    } else {
      wire::encode_activations(dtype_, hidden, n, row_width_, encoded_);
      activations = encoded_;
    }
    // A chain's first member, or every member of a tensor group (each its own stage id).
    for (size_t i = 0; i < (group_ ? members_.size() : 1); ++i) {
      RemoteMember& m = members_[i];
      member_ids_[i] = m.client->next_request_id();
      wire::ForwardHeader h{m.stage_id, static_cast<uint32_t>(n), static_cast<uint32_t>(row_width_), dtype_};
      wire::encode_forward_prefix(h, batch.positions, batch.seq_ids, rows_out ? &rows_out_ : nullptr, route_, prefix_,
                                  logits != nullptr);
      const std::span<const uint8_t> parts[] = {prefix_, activations};
      m.client->connection().send(MessageType::Forward, member_ids_[i], parts);
    }
    pending_id_ = member_ids_[0];  // the request of the chain's first member, or of the group's answerer (member 0)
    pending_hidden_ = hidden;
    pending_n_ = n;
    pending_rows_out_ = rows_out;
    pending_logits_ = logits;
  } catch (...) {
    release_leases();
    throw;
  }
}

void RemoteStage::collect() {
  if (pending_id_ == 0) fail("internal: {} has no step to collect", describe());
  const uint64_t id = pending_id_;
  pending_id_ = 0;
  struct Release {
    RemoteStage& s;
    ~Release() { s.release_leases(); }
  } release{*this};
  receive_result(id);
  const int n = pending_rows_out_ ? static_cast<int>(rows_out_.size()) : pending_n_;
  wire::ResultView r = wire::decode_result(frame_.payload);
  if (pending_logits_) {
    // The head ran on the members: the listed rows' logits, f32.
    if (r.n_tokens != static_cast<uint32_t>(n) || r.n_embd != static_cast<uint32_t>(head_vocab_) ||
        r.dtype != wire::WireDType::F32)
      throw wire::ProtocolError(wire::ErrorCode::Malformed,
                                fmt::format("{} answered with logits of the wrong shape", describe()));
    wire::decode_activations(wire::WireDType::F32, r.activations.data(), n, head_vocab_, pending_logits_);
    return;
  }
  if (r.n_tokens != static_cast<uint32_t>(n) || r.n_embd != static_cast<uint32_t>(n_embd_) || r.dtype != dtype_)
    throw wire::ProtocolError(wire::ErrorCode::Malformed,
                              fmt::format("{} answered with a result of the wrong shape", describe()));
  if (row_width_ == n_embd_) {
    wire::decode_activations(dtype_, r.activations.data(), n, n_embd_, pending_hidden_);
    if (pending_rows_out_) wire::unpack_rows(pending_hidden_, n_embd_, rows_out_);
    return;
  }
  // Each returned row's residual values back into its travelling row, whose per-layer inputs stay.
  narrow_.resize(static_cast<size_t>(n) * n_embd_);
  wire::decode_activations(dtype_, r.activations.data(), n, n_embd_, narrow_.data());
  for (int i = 0; i < n; ++i) {
    const size_t row = pending_rows_out_ ? static_cast<size_t>(rows_out_[i]) : static_cast<size_t>(i);
    std::memcpy(pending_hidden_ + row * row_width_, narrow_.data() + static_cast<size_t>(i) * n_embd_,
                n_embd_ * sizeof(float));
  }
}

void RemoteStage::cancel() noexcept {
  // The answer to the abandoned request is skipped by the next wait on
  // this (star: one member's) connection: expect_reply ignores earlier
  // request ids of the same client.
  pending_id_ = 0;
  release_leases();
}

void RemoteStage::receive_result(uint64_t request_id) {
  using Clock = std::chrono::steady_clock;
  wire::Connection& last = members_[answerer_].client->connection();
  if (members_.size() == 1) {
    // The worker sends HEARTBEATs while it computes: only silence times out.
    last.expect_reply(frame_, MessageType::ForwardResult, request_id, members_.back().client->timeout_ms());
    return;
  }
  // A chain: the last member answers, any member may report an error about
  // this step, and every member must keep showing signs of life (HEARTBEATs
  // when idle or busy): the first one silent past its timeout is the lost one.
  std::vector<pollfd>& fds = poll_set_;
  for (;;) {
    const auto now = Clock::now();
    int wait_ms = 1 << 30;
    for (auto& m : members_) {
      const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - m.client->connection().last_received());
      const int left = m.client->timeout_ms() - static_cast<int>(silent.count());
      if (left <= 0)
        throw wire::LinkError(wire::LinkError::Kind::Timeout, m.client->address(),
                              fmt::format("{} was silent for {:.1f} s (timeout) during a {} step",
                                          m.client->address(), silent.count() / 1000.0, group_ ? "tensor group" : "chain"),
                              &m.client->connection());
      wait_ms = std::min(wait_ms, left);
    }
    int rc = ::poll(fds.data(), fds.size(), wait_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) fail("waiting for the chain {}: poll failed", describe());
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      wire::Connection& conn = members_[i].client->connection();
      if (!conn.receive_one(frame_, members_[i].client->timeout_ms())) continue;  // a HEARTBEAT
      // Stale: an answer to an abandoned step (a group member's by its own request id).
      const uint64_t current = group_ ? member_ids_[i] : request_id;
      if (frame_.header.request_id != 0 && frame_.header.request_id < current) continue;
      conn.check(frame_, MessageType::ForwardResult);  // an ERROR throws with the worker's message
      if (i != answerer_)
        throw wire::ProtocolError(wire::ErrorCode::Malformed,
                                  fmt::format("{} answered a step it does not end", conn.peer()));
      if (frame_.header.request_id != request_id)
        throw wire::ProtocolError(wire::ErrorCode::Malformed,
                                  fmt::format("{} answered request {} while {} was pending", last.peer(),
                                              frame_.header.request_id, request_id));
      return;
    }
  }
}

const RemoteMember& RemoteStage::holder(int layer) const {
  if (group_) fail("{}: a tensor group's members each hold a share of a layer's cache: it cannot be moved", describe());
  for (const RemoteMember& m : members_)
    if (layer >= m.layer_begin && layer < m.layer_end) return m;
  fail("layer {} is not in {}", layer, describe());
}

LayerCache RemoteStage::read_cache(int seq, int layer) {
  const RemoteMember& m = holder(layer);
  return m.client->read_cache(m.stage_id, seq, layer);
}

void RemoteStage::write_cache(int seq, int layer, const LayerCache& cache) {
  const RemoteMember& m = holder(layer);
  m.client->write_cache(m.stage_id, seq, layer, cache);
}

bool RemoteStage::copy_cache_to(Stage& to, int seq, int layer) {
  auto* other = dynamic_cast<RemoteStage*>(&to);
  if (!other || group_ || other->group_) return false;
  const RemoteMember &from = holder(layer), &into = other->holder(layer);
  if (from.client != into.client) return false;
  from.client->copy_cache(from.stage_id, into.stage_id, seq, layer);
  return true;
}

void RemoteStage::truncate_sequence(int seq, int n_pos) {
  for (auto& m : members_) m.client->kv_op({{"stage", m.stage_id}, {"op", "truncate"}, {"seq", seq}, {"n_pos", n_pos}});
}

}  // namespace shoal
