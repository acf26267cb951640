#include "cluster/wire/forward_message.h"

#include <cstring>

#include "cluster/wire/protocol.h"

namespace shoal::wire {
namespace {

constexpr uint32_t kMaxTokens = 1u << 16;
constexpr uint32_t kMaxWidth = 1u << 16;
constexpr uint16_t kMaxRoute = 64;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> p) : p_(p) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::span<const uint8_t> take(size_t n) {
    need(n);
    auto s = p_.subspan(at_, n);
    at_ += n;
    return s;
  }
  size_t left() const { return p_.size() - at_; }

 private:
  void need(size_t n) const {
    if (n > p_.size() - at_) throw ProtocolError(ErrorCode::Malformed, "FORWARD payload is truncated");
  }
  std::span<const uint8_t> p_;
  size_t at_ = 0;
};

// A result may carry no rows (a prompt's chunk whose rows no one reads).
void check_shape(uint32_t n_tokens, uint32_t n_embd, uint8_t dtype, uint32_t min_tokens = 1,
                 uint32_t max_width = kMaxWidth) {
  if (n_tokens < min_tokens || n_tokens > kMaxTokens || n_embd == 0 || n_embd > max_width ||
      dtype >= static_cast<uint8_t>(WireDType::COUNT))
    throw ProtocolError(ErrorCode::Malformed, "FORWARD has an impossible shape or dtype");
}

void copy_ints(Reader& r, size_t n, std::vector<int32_t>& out) {
  out.resize(n);
  if (n) std::memcpy(out.data(), r.take(n * 4).data(), n * 4);
}

}  // namespace

void encode_forward_prefix(const ForwardHeader& h, std::span<const int32_t> positions,
                           std::span<const int32_t> seq_ids, const std::vector<int32_t>* rows_out,
                           std::span<const ChainHop> route, std::vector<uint8_t>& out, bool logits) {
  if (logits && !rows_out) fail("internal: FORWARD asks for logits without listing its rows out");
  out.clear();
  put(out, h.stage_id);
  put(out, h.n_tokens);
  put(out, h.n_embd);
  put(out, static_cast<uint8_t>(h.dtype));
  put(out, static_cast<uint8_t>((rows_out ? kForwardRowsOut : 0) | (logits ? kForwardLogits : 0)));
  put(out, static_cast<uint16_t>(route.size()));
  for (int32_t p : positions) put(out, p);
  for (int32_t s : seq_ids) put(out, s);
  if (rows_out) {
    put(out, static_cast<uint32_t>(rows_out->size()));
    for (int32_t t : *rows_out) put(out, t);
  }
  for (const auto& hop : route) {
    put(out, hop.stage_id);
    put(out, static_cast<uint16_t>(hop.address.size()));
    out.insert(out.end(), hop.address.begin(), hop.address.end());
  }
}

ForwardView decode_forward(std::span<const uint8_t> payload, std::vector<int32_t>& positions,
                           std::vector<int32_t>& seq_ids, std::vector<int32_t>& rows_out) {
  Reader r(payload);
  ForwardView v;
  v.header.stage_id = r.get<uint32_t>();
  v.header.n_tokens = r.get<uint32_t>();
  v.header.n_embd = r.get<uint32_t>();
  const uint8_t dtype = r.get<uint8_t>();
  const uint8_t flags = r.get<uint8_t>();
  const uint16_t n_route = r.get<uint16_t>();
  check_shape(v.header.n_tokens, v.header.n_embd, dtype);
  if (flags & ~(kForwardRowsOut | kForwardLogits))
    throw ProtocolError(ErrorCode::Malformed, "FORWARD has unknown flags");
  if ((flags & kForwardLogits) && !(flags & kForwardRowsOut))
    throw ProtocolError(ErrorCode::Malformed, "FORWARD asks for logits without listing its rows out");
  if (n_route > kMaxRoute) throw ProtocolError(ErrorCode::Malformed, "FORWARD chain route is too long");
  v.header.dtype = static_cast<WireDType>(dtype);
  const size_t n = v.header.n_tokens;
  copy_ints(r, n, positions);
  copy_ints(r, n, seq_ids);
  v.positions = positions;
  v.seq_ids = seq_ids;
  v.has_rows_out = flags & kForwardRowsOut;
  v.logits = flags & kForwardLogits;
  rows_out.clear();
  if (v.has_rows_out) {
    const uint32_t n_out = r.get<uint32_t>();
    if (n_out > n) throw ProtocolError(ErrorCode::Malformed, "FORWARD lists more rows out than it has rows");
    copy_ints(r, n_out, rows_out);
    for (size_t i = 0; i < rows_out.size(); ++i)
      if (rows_out[i] < 0 || static_cast<size_t>(rows_out[i]) >= n || (i > 0 && rows_out[i] <= rows_out[i - 1]))
        throw ProtocolError(ErrorCode::Malformed, "FORWARD's rows out are not ascending rows of the batch");
  }
  v.rows_out = rows_out;
  for (uint16_t i = 0; i < n_route; ++i) {
    ChainHop hop;
    hop.stage_id = r.get<uint32_t>();
    const uint16_t len = r.get<uint16_t>();
    auto addr = r.take(len);
    hop.address.assign(addr.begin(), addr.end());
    v.route.push_back(std::move(hop));
  }
  size_t expected;
  try {
    expected = wire_bytes(v.header.dtype, n, v.header.n_embd);
  } catch (const Error& e) {
    throw ProtocolError(ErrorCode::Malformed, e.what());
  }
  if (r.left() != expected)
    throw ProtocolError(ErrorCode::Malformed, fmt::format("FORWARD carries {} activation bytes, expected {}",
                                                          r.left(), expected));
  v.activations = r.take(expected);
  return v;
}

void encode_result_prefix(uint32_t n_tokens, uint32_t n_embd, WireDType dtype, std::vector<uint8_t>& out) {
  out.clear();
  put(out, n_tokens);
  put(out, n_embd);
  put(out, static_cast<uint8_t>(dtype));
  put(out, uint8_t{0});
  put(out, uint16_t{0});
}

ResultView decode_result(std::span<const uint8_t> payload) {
  Reader r(payload);
  ResultView v;
  v.n_tokens = r.get<uint32_t>();
  v.n_embd = r.get<uint32_t>();
  const uint8_t dtype = r.get<uint8_t>();
  r.get<uint8_t>();
  r.get<uint16_t>();
  check_shape(v.n_tokens, v.n_embd, dtype, 0, kMaxResultWidth);
  v.dtype = static_cast<WireDType>(dtype);
  size_t expected;
  try {
    expected = wire_bytes(v.dtype, v.n_tokens, v.n_embd);
  } catch (const Error& e) {
    throw ProtocolError(ErrorCode::Malformed, e.what());
  }
  if (r.left() != expected) throw ProtocolError(ErrorCode::Malformed, "FORWARD_RESULT has the wrong size");
  v.activations = r.take(expected);
  return v;
}

}  // namespace shoal::wire
