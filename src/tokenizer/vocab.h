#pragma once
// The vocabulary of a GGUF model: token texts, scores and attributes, the
// special token ids and the tokenizer flags. Read the way llama.cpp reads them
// (llama-vocab.cpp, llama_vocab::impl::load), defaults and quirks included,
// so that token ids agree with it exactly.
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shoal {

namespace gguf {
class File;
}

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

enum class VocabType { kSpm, kBpe };  // tokenizer.ggml.model "llama" / "gpt2"

// Token attributes, a bit set. GGUF stores one token type per token; a few
// load-time rules add bits (an end-of-turn token that is not typed control
// becomes control, as in llama.cpp).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 6,  // a special token that eats the whitespace before it
  kAttrRstrip = 1u << 7,  // ... and after it
};

struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

class Vocab {
 public:
  // Throws shoal::Error on a missing, malformed or unsupported vocabulary.
  static Vocab load(const gguf::File& file);

  VocabType type() const { return type_; }
  const std::string& pre() const { return pre_; }  // tokenizer.ggml.pre, "" when absent
  int size() const { return static_cast<int>(tokens_.size()); }
  bool valid(TokenId id) const { return id >= 0 && id < size(); }
  const TokenData& token(TokenId id) const { return tokens_[static_cast<size_t>(id)]; }  // unchecked: see valid()

  std::optional<TokenId> find(std::string_view text) const;
  // Exact-text lookup without the optional, for hot loops.
  TokenId find_or_none(std::string_view text) const;
  // The token that stands for one raw byte (SPM "<0x0A>" or the character
  // itself; BPE the byte-level character), kNoToken when there is none.
  TokenId byte_to_token(uint8_t byte) const;
  // Merge priority of the pair (lower merges first), -1 when not a merge.
  int merge_rank(std::string_view left, std::string_view right) const;

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId eot() const { return eot_; }
  TokenId eom() const { return eom_; }
  TokenId unk() const { return unk_; }
  TokenId pad() const { return pad_; }
  TokenId sep() const { return sep_; }
  bool add_sep() const { return add_sep_; }  // a separator between a pair of texts (rerankers)
  // Fill-in-the-middle markers (kNoToken when the model has none): prefix,
  // suffix, middle; the repository name and the file separator.
  TokenId fim_pre() const { return fim_pre_; }
  TokenId fim_suf() const { return fim_suf_; }
  TokenId fim_mid() const { return fim_mid_; }
  TokenId fim_rep() const { return fim_rep_; }
  TokenId fim_sep() const { return fim_sep_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool ignore_merges() const { return ignore_merges_; }
  bool clean_spaces() const { return clean_spaces_; }
  // BPE over raw UTF-8 with spaces written as U+2581 and bytes as <0xXX>
  // tokens (gemma4), not over GPT-2's byte-level alphabet.
  bool escape_spaces() const { return escape_spaces_; }
  bool is_eog(TokenId id) const { return eog_.count(id) != 0; }
  const std::set<TokenId>& eog_ids() const { return eog_; }

  // Control, user-defined and unknown tokens, longest text first: the order in
  // which encode() cuts them out of the text.
  const std::vector<TokenId>& special_tokens() const { return special_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  // Merge pairs are looked up by string_view pairs without building strings.
  struct PairHash {
    using is_transparent = void;
    template <typename A, typename B>
    size_t operator()(const std::pair<A, B>& p) const noexcept {
      const size_t h1 = std::hash<std::string_view>{}(p.first);
      const size_t h2 = std::hash<std::string_view>{}(p.second);
      return h1 ^ (h2 + 0x9e3779b97f4a7c15ull + (h1 << 6) + (h1 >> 2));
    }
  };
  struct PairEq {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const noexcept {
      return std::string_view(a.first) == std::string_view(b.first) &&
             std::string_view(a.second) == std::string_view(b.second);
    }
  };

  void read_tokens(const gguf::File& file);
  void read_merges(const gguf::File& file);
  void read_special_ids(const gguf::File& file);
  void detect_end_of_generation();
  void apply_model_quirks(const gguf::File& file);

  VocabType type_ = VocabType::kSpm;
  std::string pre_;
  std::vector<TokenData> tokens_;
  std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> by_text_;
  std::unordered_map<std::pair<std::string, std::string>, int, PairHash, PairEq> merges_;
  TokenId byte_tokens_[256] = {};

  TokenId bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken;
  TokenId unk_ = kNoToken, pad_ = kNoToken, sep_ = kNoToken;
  TokenId fim_pre_ = kNoToken, fim_suf_ = kNoToken, fim_mid_ = kNoToken;
  TokenId fim_pad_ = kNoToken, fim_rep_ = kNoToken, fim_sep_ = kNoToken;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_sep_ = false;
  bool add_space_prefix_ = false;
  bool ignore_merges_ = false;
  bool clean_spaces_ = false;
  bool escape_spaces_ = false;
  std::set<TokenId> eog_;
  std::vector<TokenId> special_;
};

}  // namespace shoal
