#pragma once
// Pre-tokenizers of byte-level BPE vocabularies: the regular expressions that
// cut text into words before merges run, chosen by tokenizer.ggml.pre, with
// the flags llama.cpp ties to each pre type. Matching is done by PCRE2 with
// PCRE2_UTF | PCRE2_UCP.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shoal {

struct PreTokenizerSpec {
  std::string name;                   // the canonical llama.cpp pre type
  std::vector<std::string> patterns;  // applied in order; each splits the words of the one before
  bool ignore_merges = false;         // a word that is already a token is not merged (llama3)
  bool clean_spaces = true;           // decode() removes " ," " ." ... (clean_up_tokenization_spaces)
  bool add_bos = false;               // default for add_bos before metadata overrides it
  bool no_default_bos = false;        // llama.cpp drops the default BOS id (chatglm)
};

// The spec for a tokenizer.ggml.pre value ("" means llama.cpp's "default").
// Throws shoal::Error naming an unknown pre type.
PreTokenizerSpec pretokenizer_spec(const std::string& pre);

// Every pre type name pretokenizer_spec() accepts.
std::vector<std::string> supported_pretokenizers();

class PreTokenizer {
 public:
  // Compiles the patterns; throws shoal::Error if PCRE2 rejects one.
  explicit PreTokenizer(const std::vector<std::string>& patterns);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits valid UTF-8 text into words. As in llama.cpp every match is a word
  // and so is every stretch of text between matches: the words always cover
  // the text exactly. Each pattern only sees one word of the previous split
  // at a time (a look-ahead stops at the word's end). Thread-safe.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> compiled_;
};

// Rewrites \s and \S to llama.cpp's whitespace set (Unicode White_Space),
// whatever PCRE2 version's idea of \s. Exposed for tests.
std::string pcre2_pattern(std::string_view llama_pattern);

}  // namespace shoal
