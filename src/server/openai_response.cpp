// OpenAI's response objects, stream chunks and error bodies, shaped as the
// official clients parse them (chat.completion / chat.completion.chunk /
// text_completion, usage on the last chunk when asked).
#include <chrono>
#include <random>

#include "server/openai_types.h"

namespace shoal::server {
namespace {

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// llama-server's timings object, which its clients and benchmarks read.
json timings_json(const Usage& u) {
  const double prompt_ms = u.prompt_seconds * 1e3, predicted_ms = u.generation_seconds * 1e3;
  return {{"prompt_n", u.prompt_computed},
          {"prompt_ms", prompt_ms},
          {"prompt_per_second", prompt_ms > 0 ? u.prompt_computed * 1e3 / prompt_ms : 0.0},
          {"predicted_n", u.completion_tokens},
          {"predicted_ms", predicted_ms},
          {"predicted_per_second", predicted_ms > 0 ? u.completion_tokens * 1e3 / predicted_ms : 0.0},
          {"draft_n", u.drafted},
          {"draft_n_accepted", u.accepted}};
}

json base(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model},
          {"system_fingerprint", "shoal"}};
}

}  // namespace

std::string random_id(const char* prefix) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

json error_body(int status, const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  return {{"error", {{"message", message}, {"type", type}, {"param", nullable(param)}, {"code", nullable(code)}}}};
}

ResponseMeta new_response_meta(bool chat, const std::string& model) {
  ResponseMeta meta;
  meta.chat = chat;
  meta.id = random_id(chat ? "chatcmpl-" : "cmpl-");
  meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
  meta.model = model;
  return meta;
}

json completion_response(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                         const Usage& usage, const std::string& reasoning, const json& logprobs,
                         const json& tool_calls) {
  json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  if (meta.chat) {
    // A reply that only calls tools has null content, as OpenAI's.
    choice["message"] = {{"role", "assistant"},
                         {"content", tool_calls.is_array() && text.empty() ? json(nullptr) : json(text)},
                         {"refusal", nullptr}};
    if (tool_calls.is_array()) choice["message"]["tool_calls"] = tool_calls;
    if (!reasoning.empty()) choice["message"]["reasoning_content"] = reasoning;
  } else {
    choice["text"] = text;
  }
  json r = base(meta, meta.chat ? "chat.completion" : "text_completion");
  r["choices"] = json::array({std::move(choice)});
  r["usage"] = usage_json(usage);
  r["timings"] = timings_json(usage);
  return r;
}

json stream_chunk(const ResponseMeta& meta, std::string_view text, const std::string& finish_reason,
                  bool role_chunk, bool with_usage_null, std::string_view reasoning, const json& logprobs,
                  const json& tool_calls) {
  json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", nullable(finish_reason)}};
  if (meta.chat) {
    json delta = json::object();
    if (role_chunk) delta = {{"role", "assistant"}, {"content", ""}};
    else if (tool_calls.is_array()) delta["tool_calls"] = tool_calls;
    else if (finish_reason.empty() && !reasoning.empty()) delta["reasoning_content"] = std::string(reasoning);
    else if (finish_reason.empty()) delta["content"] = std::string(text);
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = std::string(text);
  }
  json r = base(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array({std::move(choice)});
  if (with_usage_null) r["usage"] = nullptr;
  return r;
}

json logprobs_json(const ResponseMeta& meta, const Tokenizer& tokenizer, const std::vector<TokenLogprob>& tokens,
                   size_t& offset) {
  if (meta.logprobs < 0) return nullptr;
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
  };
  if (meta.chat) {
    json content = json::array();
    for (const TokenLogprob& t : tokens) {
      const std::string piece = tokenizer.token_to_piece(t.token);
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string p = tokenizer.token_to_piece(id);
        top.push_back({{"token", p}, {"logprob", lp}, {"bytes", bytes(p)}});
      }
      content.push_back({{"token", piece}, {"logprob", t.logprob}, {"bytes", bytes(piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const TokenLogprob& t : tokens) {
    const std::string piece = tokenizer.token_to_piece(t.token);
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[tokenizer.token_to_piece(id)] = lp;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset);
    offset += piece.size();
  }
  return out;
}

json usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  json r = base(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array();
  r["usage"] = usage_json(usage);
  r["timings"] = timings_json(usage);
  return r;
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& data) { return "data: " + dump(data) + "\n\n"; }

namespace {

// llama-server's completion_probabilities: per token its id, text, bytes,
// logprob and the top alternatives the same way.
json native_probabilities(const Tokenizer& tokenizer, const std::vector<TokenLogprob>& tokens) {
  json out = json::array();
  auto entry = [&](TokenId id, float logprob) {
    const std::string piece = tokenizer.token_to_piece(id, true);
    return json{{"id", id}, {"token", piece}, {"bytes", std::vector<unsigned char>(piece.begin(), piece.end())},
                {"logprob", logprob}};
  };
  for (const TokenLogprob& t : tokens) {
    json e = entry(t.token, t.logprob);
    json top = json::array();
    for (const auto& [id, logprob] : t.top) top.push_back(entry(id, logprob));
    e["top_logprobs"] = std::move(top);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

json native_completion_response(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                                const std::string& stop_string, const Usage& usage, const Tokenizer& tokenizer,
                                const std::vector<TokenLogprob>& logprobs) {
  const std::string stop_type = finish_reason == "length" ? "limit" : stop_string.empty() ? "eos" : "word";
  json r = {{"index", 0},
            {"content", text},
            {"tokens", json::array()},
            {"id_slot", -1},
            {"stop", true},
            {"model", meta.model},
            {"tokens_predicted", usage.completion_tokens},
            {"tokens_evaluated", usage.prompt_tokens},
            {"has_new_line", text.find('\n') != std::string::npos},
            {"truncated", false},
            {"stop_type", stop_type},
            {"stopping_word", stop_string},
            {"tokens_cached", usage.prompt_tokens - usage.prompt_computed},
            {"timings", timings_json(usage)}};
  if (meta.logprobs >= 0 && !logprobs.empty()) r["completion_probabilities"] = native_probabilities(tokenizer, logprobs);
  return r;
}

json native_stream_chunk(const std::string& text, int n_prompt, const Tokenizer& tokenizer,
                         const std::vector<TokenLogprob>& logprobs) {
  json r = {{"index", 0}, {"content", text}, {"tokens", json::array()},
            {"stop", false}, {"id_slot", -1}, {"tokens_evaluated", n_prompt}};
  if (!logprobs.empty()) r["completion_probabilities"] = native_probabilities(tokenizer, logprobs);
  return r;
}

}  // namespace shoal::server
