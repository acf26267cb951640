// RequestReader: requests fed in pieces as a socket would deliver them,
// chunked bodies decoded under the limit, and every limit answered with
// its status before the bytes behind it are held.
#include "server/http_request_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace shoal::server {
namespace {

using State = RequestReader::State;

RequestLimits small() { return RequestLimits{256, 4, 16}; }

// Feeds `text` one byte at a time (the worst a client can do).
State feed_bytewise(RequestReader& r, const std::string& text) {
  State s = r.state();
  for (char c : text) s = r.feed(std::string_view(&c, 1));
  return s;
}

TEST(HttpRequestReader, ReadsAHeadAndABodyInAnyPieces) {
  RequestReader r(small());
  const std::string req = "POST /v1/models/a%20b?x=1&y=two+words HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
  EXPECT_EQ(feed_bytewise(r, req), State::Complete);
  EXPECT_EQ(r.request().method, "POST");
  EXPECT_EQ(r.request().path, "/v1/models/a b");
  EXPECT_EQ(r.request().get_param_value("y"), "two words");
  EXPECT_EQ(r.request().get_header_value("host"), "h");
  EXPECT_EQ(r.request().body, "hello");
  EXPECT_FALSE(r.close_after());
}

TEST(HttpRequestReader, DecodesAChunkedBodyAndKeepsThePipelinedRest) {
  RequestReader r(small());
  const std::string req =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nX-T: 1\r\n\r\nGET /next";
  EXPECT_EQ(feed_bytewise(r, req), State::Complete);
  EXPECT_EQ(r.request().body, "abcdefg");
  EXPECT_EQ(r.request().get_header_value("Content-Length"), "7");
  EXPECT_FALSE(r.request().has_header("Transfer-Encoding"));
  EXPECT_EQ(r.take_leftover(), "GET /next");
}

TEST(HttpRequestReader, RefusesWhatIsOverALimit) {
  {
    RequestReader r(small());  // a head that never ends
    EXPECT_EQ(r.feed("GET / HTTP/1.1\r\nX: " + std::string(300, 'a')), State::Failed);
    EXPECT_EQ(r.error_status(), 431);
  }
  {
    RequestReader r(small());  // too many headers
    EXPECT_EQ(r.feed("GET / HTTP/1.1\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\n\r\n"), State::Failed);
    EXPECT_EQ(r.error_status(), 431);
  }
  {
    RequestReader r(small());  // a declared body over the limit: refused from the head
    EXPECT_EQ(r.feed("POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n"), State::Failed);
    EXPECT_EQ(r.error_status(), 413);
  }
  {
    RequestReader r(small());  // a chunked body over the limit: refused as it arrives
    EXPECT_EQ(r.feed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n"), State::Body);
    EXPECT_EQ(r.feed("9\r\n"), State::Failed);
    EXPECT_EQ(r.error_status(), 413);
  }
  {
    RequestReader r(small());  // both framings: ambiguous
    EXPECT_EQ(r.feed("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), State::Failed);
    EXPECT_EQ(r.error_status(), 400);
  }
}

TEST(HttpRequestReader, RefusesMalformedRequests) {
  for (const std::string bad : {"GARBAGE\r\n\r\n", "GET / HTTP/2.0\r\n\r\n", "GET / HTTP/1.1\r\nNo colon\r\n\r\n",
                                "POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
                                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    RequestReader r(small());
    EXPECT_EQ(r.feed(bad), State::Failed) << bad;
    EXPECT_EQ(r.error_status(), 400) << bad;
  }
  RequestReader r(small());
  EXPECT_EQ(r.feed("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), State::Failed);
  EXPECT_EQ(r.error_status(), 501);
}

TEST(HttpRequestReader, HonoursExpectContinueAndConnectionClose) {
  RequestReader r(small());
  EXPECT_EQ(r.feed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nConnection: close\r\nContent-Length: 2\r\n\r\n"),
            State::Body);
  EXPECT_TRUE(r.wants_continue());
  EXPECT_FALSE(r.wants_continue());  // once
  EXPECT_EQ(r.feed("ok"), State::Complete);
  EXPECT_TRUE(r.close_after());
  RequestReader old(small());
  EXPECT_EQ(old.feed("GET / HTTP/1.0\r\n\r\n"), State::Complete);
  EXPECT_TRUE(old.close_after());
}

}  // namespace
}  // namespace shoal::server
