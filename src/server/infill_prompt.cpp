#include "server/infill_prompt.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/openai_types.h"

namespace shoal::server {
namespace {

// llama-server's default batch, which its layout fits prefix and suffix to.
constexpr int kBatch = 2048;

[[noreturn]] void invalid(const std::string& field, const std::string& message) {
  throw ApiError(400, fmt::format("Invalid '{}': {}", field, message), "invalid_request_error", field,
                 "invalid_value");
}

// where: the object's own path ("input_extra[2]"), empty for the body.
std::string text_field(const nlohmann::json& body, const char* key, bool required, const std::string& where = {}) {
  const std::string field = where.empty() ? key : where + "." + key;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) {
    if (required)
      throw ApiError(400, fmt::format("Missing required parameter: '{}'.", field), "invalid_request_error", field,
                     "missing_required_parameter");
    return {};
  }
  if (!it->is_string()) invalid(field, "expected a string.");
  return it->get<std::string>();
}

void append(std::vector<TokenId>& to, const std::vector<TokenId>& tokens) {
  to.insert(to.end(), tokens.begin(), tokens.end());
}

}  // namespace

InfillInput take_infill_input(nlohmann::json& body) {
  InfillInput in;
  in.prefix = text_field(body, "input_prefix", true);
  in.suffix = text_field(body, "input_suffix", true);
  in.prompt = text_field(body, "prompt", false);
  if (auto it = body.find("input_extra"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) invalid("input_extra", "expected an array of {\"filename\": string, \"text\": string}.");
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& chunk = (*it)[i];
      const std::string at = fmt::format("input_extra[{}]", i);
      if (!chunk.is_object()) invalid(at, "expected {\"filename\": string, \"text\": string}.");
      const std::string text = text_field(chunk, "text", true, at);
      auto name = chunk.find("filename");
      if (name != chunk.end() && !name->is_string()) invalid(at + ".filename", "expected a string.");
      in.extra.emplace_back(name == chunk.end() ? "tmp" : name->get<std::string>(), text);
    }
  }
  for (const char* key : {"input_prefix", "input_suffix", "input_extra", "prompt"}) body.erase(key);
  return in;
}

std::vector<TokenId> infill_prompt(const Tokenizer& tokenizer, const InfillInput& in, int n_predict, int n_ctx) {
  const Vocab& vocab = tokenizer.vocab();
  std::string missing;
  if (vocab.fim_pre() == kNoToken) missing += " prefix";
  if (vocab.fim_suf() == kNoToken) missing += " suffix";
  if (vocab.fim_mid() == kNoToken) missing += " middle";
  if (!missing.empty())
    throw ApiError(400,
                   fmt::format("Infill is not supported by this model: it has no fill-in-the-middle token for the{}.",
                               missing),
                   "invalid_request_error", "", "infill_not_supported");
  auto plain = [&](const std::string& text) { return tokenizer.encode(text, false, false); };

  // The other files, each under its name, then this file's name.
  std::vector<TokenId> extra;
  if (vocab.fim_rep() != kNoToken) {
    extra.push_back(vocab.fim_rep());
    append(extra, plain("myproject\n"));
  }
  for (const auto& [name, text] : in.extra) {
    if (vocab.fim_sep() != kNoToken) {
      extra.push_back(vocab.fim_sep());
      append(extra, plain(name + "\n"));
    } else {
      append(extra, plain("\n\n--- snippet ---\n\n"));
    }
    append(extra, plain(text));
  }
  if (vocab.fim_sep() != kNoToken) {
    extra.push_back(vocab.fim_sep());
    append(extra, plain("filename\n"));
  }

  std::vector<TokenId> prefix = plain(in.prefix), suffix = plain(in.suffix);
  const std::vector<TokenId> typed = tokenizer.encode(in.prompt, false, true);
  // The end of the prefix and the start of the suffix, 3:1 within a batch.
  const size_t prefix_take = std::min<size_t>(prefix.size(), 3 * (kBatch / 4));
  const size_t suffix_take =
      std::min<size_t>(suffix.size(), static_cast<size_t>(std::max<int>(0, kBatch / 4 - (2 + static_cast<int>(typed.size())))));
  const size_t extra_take =
      std::min<size_t>(static_cast<size_t>(std::max(0, n_ctx - kBatch - 2 * n_predict)), extra.size());

  std::vector<TokenId> out(extra.end() - static_cast<std::ptrdiff_t>(extra_take), extra.end());
  if (tokenizer.add_bos()) out.push_back(tokenizer.bos());
  out.push_back(vocab.fim_pre());
  out.insert(out.end(), prefix.end() - static_cast<std::ptrdiff_t>(prefix_take), prefix.end());
  append(out, typed);
  out.push_back(vocab.fim_suf());
  out.insert(out.end(), suffix.begin(), suffix.begin() + static_cast<std::ptrdiff_t>(suffix_take));
  out.push_back(vocab.fim_mid());
  return out;
}

}  // namespace shoal::server
