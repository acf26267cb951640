#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace shoal {
namespace {

// The patterns are llama.cpp's (llm_tokenizer_bpe), which in turn are the
// tokenizer.json regexes with (?i:...) spelled out as [sS] classes.
const char* const kGpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
const char* const kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kPoro = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";
const char* const kTekken =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kSeedCoder =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kBailing =
    R"re('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re";
const char* const kDeepseekV3Words =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

struct Entry {
  std::vector<std::string> names;  // the first is the canonical name
  std::vector<std::string> patterns;
  bool ignore_merges = false;
  bool clean_spaces = true;
  bool add_bos = false;
  bool no_default_bos = false;
};

// Pre type -> patterns and flags, as llama_vocab::impl::load and
// llm_tokenizer_bpe assign them.
const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = {
      {{"default", ""}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       {kLlama3}, true, true, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}},
      {{"glm4", "chatglm-bpe"}, {kLlama3}, false, true, false, true},
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
        "a.x-4.0", "mellum", "modern-bert", "exaone4"},
       {kGpt2}},
      {{"trillion", "granite-docling"}, {kGpt2}, false, false},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      // SmolLM uses the starcoder pre-tokenizer: every digit is a word of its own.
      {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"}, {R"(\p{N})", kGpt2}},
      {{"smollm", "command-r"}, {R"(\p{N})", kGpt2}, false, false},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"}, {kQwen2}, false, false},
      {{"stablelm2", "megrez"}, {kQwen2}},
      {{"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})"}, false, false},
      {{"deepseek-v3"}, {R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+", kDeepseekV3Words}, false, false},
      {{"poro-chat"}, {kPoro}, false, false},
      {{"bloom", "gpt3-finnish"}, {kPoro}},
      {{"viking"}, {kPoro, R"(\p{N})"}, false, false},
      {{"tekken"}, {kTekken}, true, false, true},
      {{"gpt-4o", "llama4", "kanana2", "talkie"}, {kGpt4o}, false, false},
      {{"seed-coder"}, {kSeedCoder}, false, false},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, {kBailing}, false, false},
      // Gemma 4's SentencePiece-style BPE: no word splitting, only runs of
      // newlines apart (its merges never span one); spaces are ▁ (Vocab).
      {{"gemma4"}, {R"([^\n]+|[\n]+)"}, false, true, true},
  };
  return entries;
}

// llama.cpp's whitespace: the Unicode White_Space property. PCRE2's own \s
// differs between versions (U+0085, for one), so patterns never use it.
const char* const kWhitespaceBody =
    R"(\x{09}-\x{0D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

}  // namespace

PreTokenizerSpec pretokenizer_spec(const std::string& pre) {
  for (const Entry& e : table()) {
    for (const std::string& name : e.names) {
      if (name == pre) {
        PreTokenizerSpec spec;
        spec.name = e.names.front();
        spec.patterns = e.patterns;
        spec.ignore_merges = e.ignore_merges;
        spec.clean_spaces = e.clean_spaces;
        spec.add_bos = e.add_bos;
        spec.no_default_bos = e.no_default_bos;
        return spec;
      }
    }
  }
  fail("unsupported tokenizer pre-type '{}' (tokenizer.ggml.pre); supported: {}", pre,
       fmt::join(supported_pretokenizers(), ", "));
}

std::vector<std::string> supported_pretokenizers() {
  std::vector<std::string> names;
  for (const Entry& e : table()) {
    for (const std::string& name : e.names) {
      if (!name.empty()) names.push_back(name);
    }
  }
  return names;
}

std::string pcre2_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char next = p[i + 1];
      ++i;
      if (next == 's') {
        out += in_class ? std::string(kWhitespaceBody) : fmt::format("[{}]", kWhitespaceBody);
      } else if (next == 'S') {
        if (in_class) fail("pre-tokenizer pattern uses \\S inside a character class: {}", p);
        out += fmt::format("[^{}]", kWhitespaceBody);
      } else {
        out += c;
        out += next;  // an escaped character never opens or closes a class
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    const std::string rewritten = pcre2_pattern(pattern);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      fail("pre-tokenizer pattern does not compile at offset {}: {} ({})", error_offset,
           reinterpret_cast<const char*>(message), pattern);
    }
    // JIT is an optimisation only; the interpreter gives the same matches.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    compiled_.push_back(std::move(compiled));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> words;
  if (text.empty()) return words;
  words.push_back(text);

  // Look-around patterns recurse on the JIT stack; the default 32 KiB is too
  // small for long words, so give each call room to grow.
  using JitStack = std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)>;
  using MatchContext = std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)>;
  JitStack jit_stack(pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr), &pcre2_jit_stack_free);
  MatchContext context(pcre2_match_context_create(nullptr), &pcre2_match_context_free);
  if (!context) fail("out of memory creating the pre-tokenizer match context");
  if (jit_stack) pcre2_jit_stack_assign(context.get(), nullptr, jit_stack.get());  // null without JIT support

  std::vector<std::string_view> next;
  for (const auto& compiled : compiled_) {
    using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;
    MatchData match(pcre2_match_data_create_from_pattern(compiled->code, nullptr), &pcre2_match_data_free);
    if (!match) fail("out of memory creating pre-tokenizer match data");
    next.clear();
    next.reserve(words.size() * 2);
    for (const std::string_view word : words) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(word.data());
      size_t start = 0;     // where the next search begins
      size_t emitted = 0;   // end of the text already turned into words
      while (start < word.size()) {
        // The caller guarantees valid UTF-8; skipping the check keeps the
        // loop linear (PCRE2 would re-check the rest of the word each call).
        const int rc = pcre2_match(compiled->code, subject, word.size(), start, PCRE2_NO_UTF_CHECK, match.get(),
                                   context.get());
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          fail("pre-tokenizer match failed: {}", reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t begin = ovector[0];
        const size_t end = ovector[1];
        if (end == begin) {  // an empty match makes no word; step over one character
          start = begin + (begin < word.size() ? utf8_sequence_length(static_cast<unsigned char>(word[begin])) : 1);
          continue;
        }
        if (begin > emitted) next.push_back(word.substr(emitted, begin - emitted));
        next.push_back(word.substr(begin, end - begin));
        emitted = end;
        start = end;
      }
      if (emitted < word.size()) next.push_back(word.substr(emitted));
    }
    words.swap(next);
  }
  return words;
}

}  // namespace shoal
