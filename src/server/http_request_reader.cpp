#include "server/http_request_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

namespace shoal::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes (and '+' in a query) decoded; a broken escape stays as it is.
std::string url_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

}  // namespace

RequestReader::State RequestReader::fail(int status, std::string message) {
  state_ = State::Failed;
  error_status_ = status;
  error_ = std::move(message);
  buf_.clear();
  return state_;
}

RequestReader::State RequestReader::feed(std::string_view bytes) {
  if (state_ == State::Complete || state_ == State::Failed) {
    buf_.append(bytes);  // the next request's; the caller takes it as leftover
    return state_;
  }
  buf_.append(bytes);
  if (state_ == State::Head) {
    // Look only at what is new (less three bytes a "\r\n\r\n" may straddle).
    const size_t from = scanned_ >= 3 ? scanned_ - 3 : 0;
    const size_t end = buf_.find("\r\n\r\n", from);
    if (end == std::string::npos) {
      scanned_ = buf_.size();
      if (buf_.size() > limits_.max_head_bytes)
        return fail(431, fmt::format("The request head is larger than {} bytes.", limits_.max_head_bytes));
      return state_;
    }
    if (end + 4 > limits_.max_head_bytes)
      return fail(431, fmt::format("The request head is larger than {} bytes.", limits_.max_head_bytes));
    if (parse_head(end) == State::Failed) return state_;
  }
  return chunked_ ? read_chunks() : read_body();
}

RequestReader::State RequestReader::parse_head(size_t head_end) {
  const std::string head = buf_.substr(0, head_end + 2);  // every line with its CRLF
  buf_.erase(0, head_end + 4);
  size_t pos = head.find("\r\n");
  const std::string_view line(head.data(), pos);
  // METHOD SP target SP HTTP/1.x
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return fail(400, "Malformed HTTP request line.");
  request_.method = std::string(line.substr(0, sp1));
  request_.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  request_.version = std::string(line.substr(sp2 + 1));
  if (request_.method.empty() || !std::all_of(request_.method.begin(), request_.method.end(), token_char) ||
      request_.target.empty() || request_.target.find(' ') != std::string::npos ||
      (request_.version != "HTTP/1.1" && request_.version != "HTTP/1.0"))
    return fail(400, "Malformed HTTP request line.");
  const size_t q = request_.target.find('?');
  request_.path = url_decode(std::string_view(request_.target).substr(0, q), false);
  if (q != std::string::npos) {
    std::string_view query = std::string_view(request_.target).substr(q + 1);
    while (!query.empty()) {
      const size_t amp = query.find('&');
      const std::string_view kv = query.substr(0, amp);
      const size_t eq = kv.find('=');
      if (!kv.empty())
        request_.params.emplace(url_decode(kv.substr(0, eq), true),
                                eq == std::string_view::npos ? std::string() : url_decode(kv.substr(eq + 1), true));
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    }
  }

  size_t n_headers = 0;
  bool have_length = false;
  std::string transfer_encoding;
  for (pos += 2; pos < head.size();) {
    const size_t eol = head.find("\r\n", pos);
    const std::string_view h(head.data() + pos, eol - pos);
    pos = eol + 2;
    if (++n_headers > limits_.max_headers)
      return fail(431, fmt::format("The request has more than {} headers.", limits_.max_headers));
    const size_t colon = h.find(':');
    if (colon == 0 || colon == std::string_view::npos || !std::all_of(h.begin(), h.begin() + colon, token_char))
      return fail(400, "Malformed HTTP header.");
    const std::string_view name = h.substr(0, colon), value = trim(h.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      uint64_t n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || value.empty() ||
          (have_length && n != content_length_))
        return fail(400, "Malformed Content-Length.");
      content_length_ = n;
      have_length = true;
    } else if (iequals(name, "Transfer-Encoding")) {
      transfer_encoding = std::string(value);
      continue;  // the body reaches the routes de-chunked
    } else if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue")) return fail(417, "Only 'Expect: 100-continue' is understood.");
      wants_continue_ = true;
      continue;
    } else if (iequals(name, "Connection")) {
      close_after_ = iequals(value, "close");
    }
    request_.headers.emplace(std::string(name), std::string(value));
  }
  if (request_.version == "HTTP/1.0" && !iequals(request_.get_header_value("Connection"), "keep-alive"))
    close_after_ = true;
  if (!transfer_encoding.empty()) {
    // Only chunked is understood; with a Content-Length too, the request is
    // ambiguous (a classic smuggling trick): refused.
    if (!iequals(transfer_encoding, "chunked")) return fail(501, "Only 'Transfer-Encoding: chunked' is supported.");
    if (have_length) return fail(400, "Both Content-Length and Transfer-Encoding were sent.");
    chunked_ = true;
  } else if (content_length_ > limits_.max_body_bytes) {
    return fail(413, fmt::format("The request body is too large: the limit is {} bytes.", limits_.max_body_bytes));
  }
  if (!chunked_ && content_length_ == 0) wants_continue_ = false;
  state_ = State::Body;
  return state_;
}

RequestReader::State RequestReader::read_body() {
  if (buf_.size() < content_length_) return state_;
  request_.body = buf_.substr(0, content_length_);
  buf_.erase(0, content_length_);
  state_ = State::Complete;
  return state_;
}

RequestReader::State RequestReader::read_chunks() {
  size_t pos = 0;
  for (;;) {
    if (chunk_ == Chunk::Size || chunk_ == Chunk::Trailers) {
      const size_t eol = buf_.find("\r\n", pos);
      if (eol == std::string::npos) {
        if (buf_.size() - pos > 1024) return fail(400, "Malformed chunked body: a line is too long.");
        break;
      }
      const std::string_view line(buf_.data() + pos, eol - pos);
      pos = eol + 2;
      if (chunk_ == Chunk::Trailers) {
        if (line.empty()) {
          request_.set_header("Content-Length", std::to_string(request_.body.size()));
          buf_.erase(0, pos);
          state_ = State::Complete;
          return state_;
        }
        trailer_bytes_ += line.size() + 2;
        if (trailer_bytes_ > limits_.max_head_bytes) return fail(431, "The request's trailers are too large.");
        continue;
      }
      const std::string_view digits = trim(line.substr(0, line.find(';')));
      uint64_t n = 0;
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n, 16);
      if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty())
        return fail(400, "Malformed chunked body: bad chunk size.");
      if (n > limits_.max_body_bytes - std::min<uint64_t>(limits_.max_body_bytes, request_.body.size()))
        return fail(413, fmt::format("The request body is too large: the limit is {} bytes.", limits_.max_body_bytes));
      if (n == 0) {
        chunk_ = Chunk::Trailers;
      } else {
        chunk_ = Chunk::Data;
        chunk_left_ = n;
      }
    } else if (chunk_ == Chunk::Data) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(chunk_left_, buf_.size() - pos));
      request_.body.append(buf_, pos, take);
      pos += take;
      chunk_left_ -= take;
      if (chunk_left_ > 0) break;
      chunk_ = Chunk::DataEnd;
    } else {  // DataEnd: the CRLF after a chunk's data
      if (buf_.size() - pos < 2) break;
      if (buf_.compare(pos, 2, "\r\n") != 0) return fail(400, "Malformed chunked body: no CRLF after a chunk.");
      pos += 2;
      chunk_ = Chunk::Size;
    }
  }
  buf_.erase(0, pos);  // decoded bytes are not kept twice
  return state_;
}

}  // namespace shoal::server
