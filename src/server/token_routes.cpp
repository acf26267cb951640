// llama-server's utility endpoints: /tokenize, /detokenize and /props, for
// clients that count tokens or read the model's template and limits.
#include "server/serving_context.h"

#include "server/openai_types.h"

namespace shoal::server {

void handle_tokenize(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req.body);
  auto content = body.find("content");
  if (content == body.end() || !content->is_string())
    throw ApiError(400, "'content' must be a string.", "invalid_request_error", "content");
  bool add_special = false, with_pieces = false;
  if (auto v = body.find("add_special"); v != body.end() && v->is_boolean()) add_special = v->get<bool>();
  if (auto v = body.find("with_pieces"); v != body.end() && v->is_boolean()) with_pieces = v->get<bool>();
  const Tokenizer& tokenizer = ctx.engine.load()->tokenizer();
  const std::vector<TokenId> ids = tokenizer.encode(content->get<std::string>(), add_special, true);
  // Written as it goes rather than built as a JSON tree: a tree holds a
  // map per token (hundreds of bytes each; a 900 kB text is 200k tokens),
  // and the allocator keeps what so many small blocks took.
  std::string out = "{\"tokens\":[";
  out.reserve(ids.size() * (with_pieces ? 24 : 7) + 16);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    if (!with_pieces) {
      out += std::to_string(ids[i]);
      continue;
    }
    out += "{\"id\":" + std::to_string(ids[i]) + ",\"piece\":";
    out += dump(json(tokenizer.token_to_piece(ids[i], true)));
    out += '}';
  }
  out += "]}";
  res.set_content(std::move(out), "application/json");
}

void handle_detokenize(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req.body);
  auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array())
    throw ApiError(400, "'tokens' must be an array of token ids.", "invalid_request_error", "tokens");
  const Tokenizer& tokenizer = ctx.engine.load()->tokenizer();
  std::vector<TokenId> ids;
  for (const json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer.n_vocab())
      throw ApiError(400, fmt::format("'tokens' holds {}, not a token id of this model (0..{}).", t.dump(),
                                      tokenizer.n_vocab() - 1),
                     "invalid_request_error", "tokens");
    ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  res.set_content(dump({{"content", tokenizer.decode(ids, true)}}), "application/json");
}

json props_json(ServingContext& ctx) {
  Engine& engine = *ctx.engine.load();
  const Tokenizer& tokenizer = engine.tokenizer();
  const ChatTemplate& tmpl = engine.chat_template();
  auto token_text = [&](TokenId id) { return id >= 0 ? tokenizer.token_text(id) : std::string(); };
  return {{"model_path", ctx.options.model_path},
          {"model_alias", ctx.model_id},
          {"n_ctx", engine.n_ctx()},
          {"total_slots", engine.options().n_seq},
          {"chat_template", tmpl.uses_jinja() ? tmpl.source() : std::string(tmpl.name())},
          {"chat_format", tmpl.name()},
          {"bos_token", token_text(tokenizer.bos())},
          {"eos_token", token_text(tokenizer.eos())},
          {"default_generation_settings",
           {{"n_ctx", engine.n_ctx()}, {"params", {{"temperature", ctx.options.defaults.sampling.temperature},
                                                   {"top_k", ctx.options.defaults.sampling.top_k},
                                                   {"top_p", ctx.options.defaults.sampling.top_p},
                                                   {"min_p", ctx.options.defaults.sampling.min_p},
                                                   {"n_predict", ctx.options.defaults.max_tokens}}}}},
          {"capabilities", {{"completion", true}, {"chat", true}, {"logprobs", true},
                            {"thinking", tmpl.thinks()}, {"tools", tmpl.uses_jinja()}, {"embeddings", true},
                            {"json_schema", true}, {"grammar", true}}},
          {"build_info", "shoal 0.1.0"}};
}

}  // namespace shoal::server
