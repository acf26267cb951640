// POST /v1/embeddings: each input's prompt read through the model (split
// across workers like any request), its rows after the output norm pooled
// as the model says (Engine::pooling) and scaled to unit length.
#include "server/request_channel.h"
#include "server/serving_context.h"

namespace shoal::server {
namespace {

std::string base64(const std::vector<float>& v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());  // little-endian f32, as OpenAI sends
  const size_t n = v.size() * sizeof(float);
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t chunk = static_cast<uint32_t>(bytes[i]) << 16;
    if (i + 1 < n) chunk |= static_cast<uint32_t>(bytes[i + 1]) << 8;
    if (i + 2 < n) chunk |= bytes[i + 2];
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

// The inputs as token lists: a string, strings, a token list, token lists.
std::vector<std::vector<TokenId>> read_inputs(const json& input, const Tokenizer& tokenizer) {
  auto bad = [](const std::string& what) {
    return ApiError(400, "Invalid 'input': " + what, "invalid_request_error", "input", "invalid_value");
  };
  auto tokens_of = [&](const json& list) {
    std::vector<TokenId> ids;
    for (const json& t : list) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer.n_vocab())
        throw bad("a token list holds " + t.dump() + ", not a token id of this model.");
      ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
    }
    return ids;
  };
  std::vector<std::vector<TokenId>> out;
  if ((input.is_array() || input.is_string()) && input.empty()) throw bad("it is empty.");
  if (input.is_string()) {
    out.push_back(tokenizer.encode(input.get<std::string>(), true, false));
  } else if (input.is_array() && !input.empty() && input[0].is_number()) {
    out.push_back(tokens_of(input));
  } else if (input.is_array()) {
    if (input.size() > 2048) throw bad("at most 2048 inputs in one request.");
    for (const json& item : input) {
      if ((item.is_string() || item.is_array()) && item.empty()) throw bad("an input is empty.");
      if (item.is_string()) out.push_back(tokenizer.encode(item.get<std::string>(), true, false));
      else if (item.is_array()) out.push_back(tokens_of(item));
      else throw bad("expected a string, an array of strings, or arrays of token ids.");
    }
  } else {
    throw bad("expected a string, an array of strings, or arrays of token ids.");
  }
  for (const auto& ids : out)
    if (ids.empty()) throw bad("an input is empty.");
  return out;
}

}  // namespace

void handle_embeddings(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Engine& engine = *ctx.engine.load();
  const json body = parse_json_body(req.body);
  std::string model;
  if (auto m = body.find("model"); m != body.end()) {
    if (!m->is_string())
      throw ApiError(400, "Invalid type for 'model': expected a string.", "invalid_request_error", "model",
                     "invalid_type");
    model = m->get<std::string>();
  }
  auto input = body.find("input");
  if (input == body.end())
    throw ApiError(400, "Missing required parameter: 'input'.", "invalid_request_error", "input",
                   "missing_required_parameter");
  std::string format = "float";
  if (auto f = body.find("encoding_format"); f != body.end() && !f->is_null()) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      throw ApiError(400, "Invalid 'encoding_format': expected 'float' or 'base64'.", "invalid_request_error",
                     "encoding_format", "invalid_value");
    format = f->get<std::string>();
  }
  if (auto d = body.find("dimensions"); d != body.end() && !d->is_null() &&
                                        !(d->is_number_integer() && d->get<int64_t>() == engine.config().n_embd))
    throw ApiError(400, fmt::format("'dimensions' is not supported: this model's embeddings have {}.",
                                    engine.config().n_embd),
                   "invalid_request_error", "dimensions", "unsupported_parameter");
  const Pooling pooling = engine.pooling();
  const auto inputs = read_inputs(*input, engine.tokenizer());
  for (const auto& ids : inputs)
    if (static_cast<int>(ids.size()) >= engine.n_ctx())
      throw ApiError(400, fmt::format("This model's maximum context length is {} tokens. However, an input has {} "
                                      "tokens.", engine.n_ctx(), ids.size()),
                     "invalid_request_error", "input", "context_length_exceeded");

  // Every input is queued at once: the scheduler batches them with whatever runs.
  std::vector<std::shared_ptr<RequestChannel>> channels;
  std::vector<uint64_t> ids;
  int prompt_tokens = 0;
  for (const auto& tokens : inputs) {
    GenerationOptions options;
    options.pooling = pooling;
    prompt_tokens += static_cast<int>(tokens.size());
    auto channel = std::make_shared<RequestChannel>();
    std::optional<uint64_t> id = ctx.in_flight.submit(*ctx.scheduler.load(), channel_request(channel, tokens, options));
    if (!id) throw ApiError(503, "The server is shutting down.", "server_error", "", "shutting_down");
    channels.push_back(channel);
    ids.push_back(*id);
  }
  for (size_t i = 0; i < channels.size(); ++i) {  // all of them, so none outlives the request
    channels[i]->wait_all();
    ctx.in_flight.remove(ids[i]);
  }
  json data = json::array();
  for (size_t i = 0; i < channels.size(); ++i) {
    const RequestResult r = channels[i]->result();
    if (r.finish_reason != "stop" || r.embedding.empty())
      throw ApiError(r.finish_reason == "unavailable" ? 503 : 500,
                     "The engine could not embed the input: " + (r.error.empty() ? r.finish_reason : r.error),
                     "server_error");
    json item = {{"object", "embedding"}, {"index", i}};
    if (format == "base64") item["embedding"] = base64(r.embedding);
    else item["embedding"] = r.embedding;
    data.push_back(std::move(item));
  }
  res.set_content(dump({{"object", "list"}, {"data", data}, {"model", ctx.echoed_model(model)},
                        {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}}),
                  "application/json");
}

}  // namespace shoal::server
