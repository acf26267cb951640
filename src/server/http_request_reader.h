#pragma once
// Reads one HTTP/1.1 request from bytes as they arrive, under limits: the
// head's size and header count, and the body's size — for a chunked body
// too, checked as it is decoded, so nothing over the limit is ever held.
// No I/O and no clock: HttpFront feeds it and keeps the deadlines.
#include <httplib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace shoal::server {

struct RequestLimits {
  size_t max_head_bytes = 64 << 10;
  size_t max_headers = 100;
  uint64_t max_body_bytes = 1 << 20;
};

class RequestReader {
 public:
  enum class State { Head, Body, Complete, Failed };

  explicit RequestReader(RequestLimits limits) : limits_(limits) {}

  // Takes more bytes. Bytes past the end of the request (a pipelined next
  // one) stay in leftover().
  State feed(std::string_view bytes);
  State state() const { return state_; }
  bool started() const { return !buf_.empty() || state_ != State::Head; }
  // The request once Complete: method, target, path, version, headers,
  // body (de-chunked; Content-Length then says its size).
  httplib::Request& request() { return request_; }
  // The client said "Expect: 100-continue" and the body is acceptable: it
  // waits for "HTTP/1.1 100 Continue" before sending the body (once).
  bool wants_continue() { return std::exchange(wants_continue_, false); }
  // Failed: the status to answer (400, 413, 431, 501) and why.
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }
  // The client wants the connection closed after this request.
  bool close_after() const { return close_after_; }
  std::string take_leftover() { return std::move(buf_); }

 private:
  State fail(int status, std::string message);
  State parse_head(size_t head_end);
  State read_body();
  State read_chunks();

  RequestLimits limits_;
  State state_ = State::Head;
  std::string buf_;        // bytes not consumed yet
  size_t scanned_ = 0;     // where the search for the head's end resumes
  httplib::Request request_;
  uint64_t content_length_ = 0;
  bool chunked_ = false;
  bool wants_continue_ = false;
  bool close_after_ = false;
  // Chunked decoding: bytes left in the current chunk (then its CRLF), or
  // reading the size line / the trailers.
  enum class Chunk { Size, Data, DataEnd, Trailers } chunk_ = Chunk::Size;
  uint64_t chunk_left_ = 0;
  size_t trailer_bytes_ = 0;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace shoal::server
