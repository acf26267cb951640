// The prompt of llama-server's /infill, laid out token for token as it lays
// it out (infill_prompt.h).
#include "server/infill_prompt.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/openai_types.h"

namespace shoal::server {
namespace {

// llama-server's default batch, which its layout fits prefix and suffix to.
constexpr int kBatch = 2048;

void append(std::vector<TokenId>& to, const std::vector<TokenId>& tokens) {
  to.insert(to.end(), tokens.begin(), tokens.end());
}

}  // namespace

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
