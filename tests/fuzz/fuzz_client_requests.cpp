// libFuzzer: bytes as the body of a request to the routes other clients
// speak (any client may send one): after a leading 'A' Anthropic's
// Messages (and count_tokens), 'R' OpenAI's Responses, 'I' llama-server's
// /infill, else OpenAI's chat. Each is read into a chat or completion
// request; nothing may crash or hang, and what is refused is an ApiError
// (a 400 for the client).
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/anthropic_messages.h"
#include "server/infill_prompt.h"
#include "server/openai_responses.h"
#include "server/openai_types.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::server;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const char kind = input.empty() ? 'C' : input[0];
  const std::string body = kind == 'A' || kind == 'R' || kind == 'I' ? input.substr(1) : input;
  try {
    const RequestDefaults defaults;
    nlohmann::json plain = parse_json_body(body);  // the depth and shape checks every route makes first
    const auto ordered = nlohmann::ordered_json::parse(body);
    if (kind == 'A') {
      parse_anthropic_request(ordered, defaults);
      parse_anthropic_request(ordered, defaults, true);
    } else if (kind == 'R') {
      parse_responses_request(ordered, defaults);
    } else if (kind == 'I') {
      take_infill_input(plain);
      plain["prompt"] = "";
      parse_native_completion_request(plain, defaults);
    } else {
      parse_chat_request(plain, defaults, ordered);
    }
  } catch (const ApiError&) {
    // refused by name: what a client gets as a 400
  }
  return 0;
}
