#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <span>

#include "gguf/reader.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal {
namespace {

// GGUF token types (gguf-py TokenType).
enum GgufTokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

uint32_t attr_from_type(int64_t type) {
  switch (type) {
    case kNormal: return kAttrNormal;
    case kUnknown: return kAttrUnknown;
    case kControl: return kAttrControl;
    case kUserDefined: return kAttrUserDefined;
    case kUnused: return kAttrUnused;
    case kByte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

// Texts llama.cpp recognises as end-of-turn / end-of-generation tokens when
// the metadata does not name them (llama_vocab::impl::load).
const char* const kEotTexts[] = {"<|eot_id|>",   "<|im_end|>", "<|end|>", "<end_of_turn>",
                                 "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
                                 "[EOT]",        "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
const char* const kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["};
// Fill-in-the-middle: prefix, suffix and middle markers (llama.cpp's list,
// for GGUFs that do not name them).
const char* const kFimPreTexts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                                    "▁<PRE>", "<|code_prefix|>", "<|prefix|>"};
const char* const kFimSufTexts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                                    "▁<SUF>", "<|code_suffix|>", "<|suffix|>"};
const char* const kFimMidTexts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                                    "▁<MID>", "<|code_middle|>", "<|middle|>"};
const char* const kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const char* const kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const char* const kFimSepTexts[] = {"<|file_sep|>"};

template <size_t N>
bool in_list(const std::string& text, const char* const (&list)[N]) {
  return std::find(std::begin(list), std::end(list), text) != std::end(list);
}

}  // namespace

std::optional<TokenId> Vocab::find(std::string_view text) const {
  const TokenId id = find_or_none(text);
  if (id == kNoToken) return std::nullopt;
  return id;
}

TokenId Vocab::find_or_none(std::string_view text) const {
  auto it = by_text_.find(text);
  return it == by_text_.end() ? kNoToken : it->second;
}

TokenId Vocab::byte_to_token(uint8_t byte) const { return byte_tokens_[byte]; }

int Vocab::merge_rank(std::string_view left, std::string_view right) const {
  auto it = merges_.find(std::pair<std::string_view, std::string_view>(left, right));
  return it == merges_.end() ? -1 : it->second;
}

Vocab Vocab::load(const gguf::File& file) {
  Vocab v;
  if (!file.has("tokenizer.ggml.model")) fail("{}: no tokenizer in this file (tokenizer.ggml.model is missing)", file.path());
  const std::string model = file.get_string("tokenizer.ggml.model");
  v.pre_ = file.get_string("tokenizer.ggml.pre", "");

  // Defaults per model type, before the metadata overrides them.
  if (model == "llama") {
    v.type_ = VocabType::kSpm;
    v.bos_ = 1;
    v.eos_ = 2;
    v.unk_ = 0;
    v.add_space_prefix_ = true;
    v.add_bos_ = true;
    v.clean_spaces_ = false;
  } else if (model == "gpt2") {
    v.type_ = VocabType::kBpe;
    const PreTokenizerSpec spec = pretokenizer_spec(v.pre_);  // throws for an unknown pre type
    if (v.pre_.empty()) {
      spdlog::warn("{}: no tokenizer.ggml.pre; using llama.cpp's 'default' pre-tokenizer, which may split "
                   "text differently from the model's own tokenizer",
                   file.path());
    }
    v.bos_ = spec.no_default_bos ? kNoToken : 11;
    v.eos_ = 11;
    v.add_bos_ = spec.add_bos;
    v.ignore_merges_ = spec.ignore_merges;
    v.clean_spaces_ = spec.clean_spaces;
  } else if (model == "gemma4") {
    // BPE over the raw UTF-8 with spaces written as U+2581 (as SentencePiece
    // does), bytes as <0xXX> tokens: llama.cpp's "gemma4" tokenizer, whose
    // pre type it sets whatever the file says, BOS always added.
    v.type_ = VocabType::kBpe;
    v.pre_ = "gemma4";
    const PreTokenizerSpec spec = pretokenizer_spec(v.pre_);
    v.escape_spaces_ = true;
    v.clean_spaces_ = spec.clean_spaces;
  } else {
    fail("{}: unsupported tokenizer model '{}' (tokenizer.ggml.model); supported: llama, gpt2, gemma4", file.path(),
         model);
  }
  v.add_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix_);

  v.read_tokens(file);
  if (v.type_ == VocabType::kBpe) v.read_merges(file);
  v.read_special_ids(file);
  if (model == "gemma4" && !v.add_bos_) {
    // llama.cpp overrides a file's add_bos_token false for Gemma 4.
    if (v.bos_ == kNoToken) fail("{}: a gemma4 tokenizer without a BOS token", file.path());
    v.add_bos_ = true;
  }
  v.detect_end_of_generation();

  // gpt-oss (harmony format): these markers are always parsed and rendered.
  for (const char* text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (auto id = v.find(text)) v.tokens_[*id].attr = kAttrUserDefined;
  }

  // The special tokens encode() cuts out first, longest first (ties by id, so
  // the order does not depend on the sort implementation).
  for (TokenId id = 0; id < v.size(); ++id) {
    if (v.tokens_[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_.push_back(id);
  }
  std::stable_sort(v.special_.begin(), v.special_.end(), [&v](TokenId a, TokenId b) {
    return v.tokens_[a].text.size() > v.tokens_[b].text.size();
  });
  v.apply_model_quirks(file);

  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    TokenId id = kNoToken;
    if (v.type_ == VocabType::kSpm || v.escape_spaces_) {  // <0xXX> tokens (gemma4's only those)
      static const char* hex = "0123456789ABCDEF";
      const char name[7] = {'<', '0', 'x', hex[byte >> 4], hex[byte & 15], '>', 0};
      id = v.find_or_none(name);
      if (id == kNoToken && !v.escape_spaces_) id = v.find_or_none(std::string(1, static_cast<char>(byte)));
    } else {
      id = v.find_or_none(byte_level_char(byte));
    }
    v.byte_tokens_[b] = id;
  }
  return v;
}

void Vocab::read_tokens(const gguf::File& file) {
  if (!file.has("tokenizer.ggml.tokens")) fail("{}: tokenizer.ggml.tokens is missing", file.path());
  std::vector<std::string> texts = file.get_strings("tokenizer.ggml.tokens");
  if (texts.empty()) fail("{}: tokenizer.ggml.tokens is empty", file.path());
  if (texts.size() > static_cast<size_t>(INT32_MAX)) fail("{}: too many tokens ({})", file.path(), texts.size());
  const size_t n = texts.size();

  const gguf::Array* scores = nullptr;
  if (const gguf::Value* s = file.find("tokenizer.ggml.scores")) {
    scores = &s->as_array("tokenizer.ggml.scores");
    if (scores->element_type != gguf::ValueType::FLOAT32 && scores->element_type != gguf::ValueType::INT32)
      fail("{}: tokenizer.ggml.scores must be float32 or int32, found {}", file.path(),
           gguf::value_type_name(scores->element_type));
    if (scores->items.size() < n)
      fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", file.path(), scores->items.size(), n);
  }
  const gguf::Array* types = nullptr;
  if (const gguf::Value* t = file.find("tokenizer.ggml.token_type")) {
    types = &t->as_array("tokenizer.ggml.token_type");
    if (types->element_type != gguf::ValueType::INT32)
      fail("{}: tokenizer.ggml.token_type must be int32, found {}", file.path(),
           gguf::value_type_name(types->element_type));
    if (types->items.size() < n)
      fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", file.path(), types->items.size(), n);
  }

  tokens_.resize(n);
  by_text_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = tokens_[i];
    t.text = std::move(texts[i]);
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp does
    auto [it, inserted] = by_text_.emplace(t.text, static_cast<TokenId>(i));
    if (!inserted)
      fail("{}: duplicate token in vocabulary: '{}' has ids {} and {}", file.path(), t.text, it->second, i);
    t.score = scores ? static_cast<float>(scores->items[i].as_float("tokenizer.ggml.scores")) : 0.0f;
    t.attr = types ? attr_from_type(types->items[i].as_int("tokenizer.ggml.token_type")) : kAttrNormal;
  }
}

void Vocab::read_merges(const gguf::File& file) {
  if (!file.has("tokenizer.ggml.merges")) fail("{}: BPE vocabulary without tokenizer.ggml.merges", file.path());
  const gguf::Array& merges = file.get_array("tokenizer.ggml.merges");
  if (merges.element_type != gguf::ValueType::STRING)
    fail("{}: tokenizer.ggml.merges must be an array of strings", file.path());
  merges_.reserve(merges.items.size());
  for (size_t i = 0; i < merges.items.size(); ++i) {
    const std::string& line = merges.items[i].as_string("tokenizer.ggml.merges");
    // "left right"; searching from 1 lets a pair start with a space.
    const size_t space = line.find(' ', 1);
    std::string left, right;
    if (space != std::string::npos) {
      left = line.substr(0, space);
      right = line.substr(space + 1);
    }
    merges_.emplace(std::make_pair(std::move(left), std::move(right)), static_cast<int>(i));  // first rank wins
  }
}

void Vocab::read_special_ids(const gguf::File& file) {
  const std::pair<const char*, TokenId*> keys[] = {
      {"tokenizer.ggml.bos_token_id", &bos_},     {"tokenizer.ggml.eos_token_id", &eos_},
      {"tokenizer.ggml.eot_token_id", &eot_},     {"tokenizer.ggml.eom_token_id", &eom_},
      {"tokenizer.ggml.unknown_token_id", &unk_}, {"tokenizer.ggml.seperator_token_id", &sep_},
      {"tokenizer.ggml.padding_token_id", &pad_}, {"tokenizer.ggml.fim_pad_token_id", &fim_pad_},
      {"tokenizer.ggml.fim_rep_token_id", &fim_rep_}, {"tokenizer.ggml.fim_sep_token_id", &fim_sep_},
      {"tokenizer.ggml.fim_pre_token_id", &fim_pre_}, {"tokenizer.ggml.fim_suf_token_id", &fim_suf_},
      {"tokenizer.ggml.fim_mid_token_id", &fim_mid_},
      // The older names of the same three; as in llama.cpp, they win where both are written.
      {"tokenizer.ggml.prefix_token_id", &fim_pre_}, {"tokenizer.ggml.suffix_token_id", &fim_suf_},
      {"tokenizer.ggml.middle_token_id", &fim_mid_},
  };
  for (const auto& [key, id] : keys) {
    if (*id != kNoToken && !valid(*id)) *id = kNoToken;  // a default outside the vocabulary
    const gguf::Value* value = file.find(key);
    if (value == nullptr) continue;
    const int64_t read = value->as_int(key);
    // llama.cpp keeps the default when the id is out of range (files write
    // 0xFFFFFFFF for "none").
    if (read >= 0 && read < size()) *id = static_cast<TokenId>(read);
  }
  add_bos_ = file.get_bool("tokenizer.ggml.add_bos_token", add_bos_);
  add_eos_ = file.get_bool("tokenizer.ggml.add_eos_token", add_eos_);
  add_sep_ = file.get_bool("tokenizer.ggml.add_sep_token", add_sep_);
  if (add_bos_ && bos_ == kNoToken) fail("{}: tokenizer.ggml.add_bos_token is true but there is no BOS token", file.path());
  if (add_eos_ && eos_ == kNoToken) fail("{}: tokenizer.ggml.add_eos_token is true but there is no EOS token", file.path());
}

void Vocab::detect_end_of_generation() {
  // llama.cpp walks an unordered map here; walking by id makes the choice of
  // eot/eom deterministic. Every candidate ends up in the EOG set either way.
  auto mark_control = [this](TokenId id) { tokens_[id].attr |= kAttrControl; };
  // Each special id the metadata left unnamed, and the texts that name it.
  const std::pair<TokenId*, std::span<const char* const>> by_text[] = {
      {&eot_, kEotTexts},       {&fim_pre_, kFimPreTexts}, {&fim_suf_, kFimSufTexts}, {&fim_mid_, kFimMidTexts},
      {&fim_pad_, kFimPadTexts}, {&fim_rep_, kFimRepTexts}, {&fim_sep_, kFimSepTexts}};
  for (TokenId id = 0; id < size(); ++id) {
    const std::string& text = tokens_[id].text;
    for (const auto& [slot, texts] : by_text) {
      if (*slot == kNoToken && std::find(texts.begin(), texts.end(), text) != texts.end()) {
        *slot = id;
        mark_control(id);
      }
    }
    if (eom_ == kNoToken && text == "<|eom_id|>") {
      eom_ = id;
      mark_control(id);
    }
  }

  eog_.clear();
  for (TokenId id : {fim_pad_, fim_rep_, fim_sep_, eos_, eot_, eom_}) {
    if (id != kNoToken) eog_.insert(id);
  }
  for (TokenId id = 0; id < size(); ++id) {
    if (in_list(tokens_[id].text, kEogTexts)) {
      eog_.insert(id);
      mark_control(id);
    }
  }

  // gpt-oss and solar-open: "<|end|>" ends a message, not the generation.
  auto has = [this](const char* text) {
    for (TokenId id : eog_) {
      if (tokens_[id].text == text) return id;
    }
    return kNoToken;
  };
  const TokenId end = has("<|end|>");
  if (end != kNoToken && ((has("<|return|>") != kNoToken && has("<|call|>") != kNoToken) ||
                          (has("<|calls|>") != kNoToken && has("<|flush|>") != kNoToken))) {
    eog_.erase(end);
    tokens_[end].attr = kAttrUserDefined;
  }
  // gemma4: "</s>" is not an end of generation there.
  const TokenId s = has("</s>");
  if (s != kNoToken && has("<|tool_response>") != kNoToken) {
    eog_.erase(s);
    tokens_[s].attr = kAttrNormal;
  }
}

void Vocab::apply_model_quirks(const gguf::File& file) {
  std::string name = file.get_string("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  // Phi-3: special tokens swallow the whitespace after them (llama.cpp sets
  // this by model name because GGUF does not carry per-token strip flags).
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (TokenId id : special_) tokens_[id].attr |= kAttrRstrip;
    if (auto id = find("</s>")) tokens_[*id].attr |= kAttrRstrip;
    for (const char* text : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (auto id = find(text)) tokens_[*id].attr &= ~kAttrRstrip;
    }
  }
}

}  // namespace shoal
