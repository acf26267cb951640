// POST /v1/embeddings and /v1/rerank: each input's prompt read through the
// model (split across workers like any request), its rows after the output
// norm pooled: as the model says (Engine::pooling) and scaled to unit
// length for an embedding, the last row through the ranking head
// (engine/rank_head.h) for a reranker's score.
#include <algorithm>

#include "server/request_channel.h"
#include "server/request_errors.h"
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

// Every prompt is queued at once (the scheduler batches them with whatever
// runs) and all are waited for, so none outlives the request.
std::vector<RequestResult> pooled(ServingContext& ctx, const std::vector<std::vector<TokenId>>& prompts,
                                  Pooling pooling) {
  std::vector<std::shared_ptr<RequestChannel>> channels;
  std::vector<uint64_t> ids;
  for (const auto& tokens : prompts) {
    GenerationOptions options;
    options.pooling = pooling;
    auto channel = std::make_shared<RequestChannel>();
    std::optional<uint64_t> id = ctx.in_flight.submit(*ctx.scheduler.load(), channel_request(channel, tokens, options));
    if (!id) {
      for (size_t i = 0; i < channels.size(); ++i) {
        channels[i]->wait_all();
        ctx.in_flight.remove(ids[i]);
      }
      throw ApiError(503, "The server is shutting down.", "server_error", "", "shutting_down");
    }
    channels.push_back(channel);
    ids.push_back(*id);
  }
  std::vector<RequestResult> out;
  for (size_t i = 0; i < channels.size(); ++i) {
    channels[i]->wait_all();
    ctx.in_flight.remove(ids[i]);
    out.push_back(channels[i]->result());
  }
  for (const RequestResult& r : out)
    if (r.finish_reason != "stop" || r.embedding.empty())
      throw ApiError(r.finish_reason == "unavailable" ? 503 : 500,
                     "The engine could not read the input: " + (r.error.empty() ? r.finish_reason : r.error),
                     "server_error");
  return out;
}

void check_context(const Engine& engine, const std::vector<std::vector<TokenId>>& prompts, const char* param) {
  for (const auto& ids : prompts)
    if (static_cast<int>(ids.size()) >= engine.n_ctx())
      throw ApiError(400, fmt::format("This model's maximum context length is {} tokens. However, an input has {} "
                                      "tokens.", engine.n_ctx(), ids.size()),
                     "invalid_request_error", param, "context_length_exceeded");
}

std::string requested_model(const json& body) {
  auto m = body.find("model");
  if (m == body.end() || m->is_null()) return {};
  if (!m->is_string())
    throw ApiError(400, "Invalid type for 'model': expected a string.", "invalid_request_error", "model",
                   "invalid_type");
  return m->get<std::string>();
}

}  // namespace

void handle_embeddings(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Engine& engine = *ctx.engine.load();
  const json body = parse_json_body(req.body);
  const std::string model = requested_model(body);
  auto input = body.find("input");
  if (input == body.end())
    missing_parameter("input");
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
  check_context(engine, inputs, "input");
  int prompt_tokens = 0;
  for (const auto& tokens : inputs) prompt_tokens += static_cast<int>(tokens.size());
  const std::vector<RequestResult> results = pooled(ctx, inputs, pooling);
  json data = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const RequestResult& r = results[i];
    json item = {{"object", "embedding"}, {"index", i}};
    if (format == "base64") item["embedding"] = base64(r.embedding);
    else item["embedding"] = r.embedding;
    data.push_back(std::move(item));
  }
  res.set_content(dump({{"object", "list"}, {"data", data}, {"model", ctx.echoed_model(model)},
                        {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}}),
                  "application/json");
}

namespace {

// A query and one document as the reranker reads them: its GGUF's rerank
// template with {query} and {document} filled in, or the two joined by the
// end and separator tokens the vocabulary adds (llama-server's layout).
std::vector<TokenId> rerank_prompt(const Engine& engine, const std::string& query, const std::string& document) {
  const Tokenizer& tok = engine.tokenizer();
  const std::string templ = engine.file().get_string("tokenizer.chat_template.rerank", "");
  if (!templ.empty()) {
    std::string text = templ;
    for (const auto& [key, value] : {std::pair<std::string, const std::string&>{"{query}", query},
                                     std::pair<std::string, const std::string&>{"{document}", document}})
      for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
        text.replace(at, key.size(), value);
    return tok.encode(text, false, true);
  }
  const Vocab& vocab = tok.vocab();
  const TokenId end = vocab.eos() != kNoToken ? vocab.eos() : vocab.sep();
  std::vector<TokenId> out;
  if (vocab.add_bos() && vocab.bos() != kNoToken) out.push_back(vocab.bos());
  for (TokenId t : tok.encode(query, false, false)) out.push_back(t);
  if (vocab.add_eos() && end != kNoToken) out.push_back(end);
  if (vocab.add_sep() && vocab.sep() != kNoToken) out.push_back(vocab.sep());
  for (TokenId t : tok.encode(document, false, false)) out.push_back(t);
  if (vocab.add_eos() && end != kNoToken) out.push_back(end);
  return out;
}

}  // namespace

void handle_rerank(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Engine& engine = *ctx.engine.load();
  const json body = parse_json_body(req.body);
  const RankHead* head = nullptr;
  try {
    head = engine.rank_head();
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("`{}` declares a ranking head this server does not read: {}", ctx.model_id,
                                    e.what()),
                   "invalid_request_error", "", "reranking_not_supported");
  }
  if (!head)
    throw ApiError(400, fmt::format("Reranking needs a model with a ranking head (a GGUF whose pooling_type is rank, "
                                    "as Qwen3-Reranker's is); `{}` has none.", ctx.model_id),
                   "invalid_request_error", "", "reranking_not_supported");
  // Jina's and Cohere's shape (documents), or Hugging Face TEI's (texts).
  for (const auto& [key, value] : body.items())
    if (key != "model" && key != "query" && key != "documents" && key != "texts" && key != "top_n" &&
        key != "return_text" && key != "return_documents")
      throw ApiError(400, fmt::format("Unrecognized request argument supplied: {}", key), "invalid_request_error", key,
                     "unknown_parameter");
  const std::string model = requested_model(body);
  const bool tei = body.contains("texts");
  const char* docs_key = tei ? "texts" : "documents";
  auto query = body.find("query");
  if (query == body.end() || !query->is_string())
    bad_value("query", "expected a string.");
  auto docs = body.find(docs_key);
  if (docs == body.end() || !docs->is_array() || docs->empty() || docs->size() > 2048)
    bad_value(docs_key, "expected an array of 1 to 2048 strings.");
  std::vector<std::string> texts;
  for (const json& d : *docs) {
    if (!d.is_string()) bad_value(docs_key, "expected an array of strings.");
    texts.push_back(d.get<std::string>());
  }
  int64_t top_n = static_cast<int64_t>(texts.size());
  if (auto t = body.find("top_n"); t != body.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1) bad_value("top_n", "expected an integer of at least 1.");
    top_n = std::min<int64_t>(t->get<int64_t>(), top_n);
  }
  bool with_text = false;
  for (const char* key : {"return_text", "return_documents"})
    if (auto v = body.find(key); v != body.end() && !v->is_null()) {
      if (!v->is_boolean()) bad_value(key, "expected a boolean.");
      with_text = with_text || v->get<bool>();
    }

  std::vector<std::vector<TokenId>> prompts;
  int prompt_tokens = 0;
  for (const std::string& doc : texts) {
    prompts.push_back(rerank_prompt(engine, query->get<std::string>(), doc));
    if (prompts.back().empty()) bad_value(docs_key, "a query and document make an empty prompt.");
    prompt_tokens += static_cast<int>(prompts.back().size());
  }
  check_context(engine, prompts, docs_key);
  const std::vector<RequestResult> results = pooled(ctx, prompts, Pooling::Rank);
  const char* score_key = tei ? "score" : "relevance_score";
  std::vector<json> ranked;
  for (size_t i = 0; i < results.size(); ++i) {
    json item = {{"index", i}, {score_key, head->score(results[i].embedding)}};
    if (with_text) {
      if (tei) item["text"] = texts[i];
      else item["document"] = {{"text", texts[i]}};
    }
    ranked.push_back(std::move(item));
  }
  // Best first; equal scores keep the documents' order.
  std::stable_sort(ranked.begin(), ranked.end(), [score_key](const json& a, const json& b) {
    return a[score_key].get<double>() > b[score_key].get<double>();
  });
  ranked.resize(static_cast<size_t>(top_n));
  if (tei) {
    res.set_content(dump(json(ranked)), "application/json");
    return;
  }
  res.set_content(dump({{"model", ctx.echoed_model(model)}, {"object", "list"}, {"results", ranked},
                        {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}}),
                  "application/json");
}

}  // namespace shoal::server
