#include "tokenizer/tokenizer.h"

#include <cstdlib>

#include "gguf/reader.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/spm_tokenizer.h"
#include "util/error.h"

namespace shoal {
namespace {

const char kSpmSpace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text, pos);
  return out;
}

// "<0x0A>" -> 0x0A; -1 if the text is not a byte token's.
int byte_token_value(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  char* end = nullptr;
  const std::string hex = text.substr(3, 2);
  const long value = std::strtol(hex.c_str(), &end, 16);
  return end == hex.c_str() + 2 ? static_cast<int>(value) : -1;
}

// llama.cpp's clean-up of tokenization spaces (llama_vocab::impl::detokenize),
// three in-place passes mirrored step by step so that its corner cases (a
// removed space becomes '\0' and is then compared) come out the same.
void clean_up_tokenization_spaces(std::string& s) {
  char* text = s.data();
  size_t total = s.size();

  const size_t total1 = total;  // " ?", " !", " .", " ," lose the space
  total = total ? 1 : 0;
  for (size_t i = 1; i < total1; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
    text[total++] = x;
  }

  const size_t total2 = total;  // " ' " becomes "'"
  total = total ? 1 : 0;
  for (size_t i = 1; i < total2; ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
      total--;
      text[++i] = '\0';
    }
    text[total++] = x;
  }

  const size_t total3 = total;  // " 's", " 'm", " 're", " 've" lose the space
  total = total ? 1 : 0;
  for (size_t i = 1; i < total3; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        total--;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
      }
    }
    text[total++] = x;
  }
  s.resize(total);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  return std::unique_ptr<Tokenizer>(new Tokenizer(Vocab::load(file)));
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  if (vocab_.type() == VocabType::kSpm) {
    spm_ = std::make_unique<SpmTokenizer>(vocab_);
  } else {
    bpe_ = std::make_unique<BpeTokenizer>(vocab_);
  }
  pieces_.reserve(static_cast<size_t>(vocab_.size()));
  for (TokenId id = 0; id < vocab_.size(); ++id) pieces_.push_back(render_piece(id));
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::check(TokenId id) const {
  if (!vocab_.valid(id)) fail("token id {} is outside the vocabulary (0..{})", id, vocab_.size() - 1);
}

const std::string& Tokenizer::token_text(TokenId id) const {
  check(id);
  return vocab_.token(id).text;
}

bool Tokenizer::is_control(TokenId id) const {
  check(id);
  return (vocab_.token(id).attr & (kAttrControl | kAttrUnknown)) != 0;
}

// The piece with special tokens rendered (llama.cpp token_to_piece with
// special=true). Unused and undefined tokens render as nothing.
std::string Tokenizer::render_piece(TokenId id) const {
  const TokenData& t = vocab_.token(id);
  if (t.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t.text;
  if (t.attr & kAttrNormal) {
    return vocab_.type() == VocabType::kSpm || vocab_.escape_spaces() ? replace_all(t.text, kSpmSpace, " ")
                                                                      : byte_level_decode(t.text);
  }
  if (t.attr & kAttrByte) {
    const int byte = byte_token_value(t.text);
    return byte < 0 ? std::string() : std::string(1, static_cast<char>(byte));
  }
  return {};
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  check(id);
  if (!render_special && (vocab_.token(id).attr & (kAttrUnknown | kAttrControl))) return {};
  return pieces_[static_cast<size_t>(id)];
}

const grammar::ByteTrie& Tokenizer::piece_trie() const {
  std::call_once(trie_once_, [this] {
    std::vector<std::string> pieces;
    pieces.reserve(pieces_.size());
    for (TokenId id = 0; id < vocab_.size(); ++id) pieces.push_back(token_to_piece(id));
    trie_ = std::make_unique<grammar::ByteTrie>(pieces);
  });
  return *trie_;
}

std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({kNoToken, 0, text.size()});
  std::vector<Fragment> next;
  for (const TokenId id : vocab_.special_tokens()) {
    const TokenData& special = vocab_.token(id);
    // Without parse_special only user-defined tokens are cut out, as
    // Hugging Face tokenizers do.
    if (!parse_special && (special.attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string& needle = special.text;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.offset;
      const size_t end = f.offset + f.length;
      const std::string_view window = text.substr(0, end);
      while (true) {
        const size_t hit = window.find(needle, begin);
        if (hit == std::string_view::npos) {
          if (begin < end) next.push_back({kNoToken, begin, end - begin});
          break;
        }
        size_t left = hit - begin;
        if (special.attr & kAttrLstrip) {
          while (left > 0 && is_ascii_space(text[begin + left - 1])) --left;
        }
        if (left > 0) next.push_back({kNoToken, begin, left});
        next.push_back({id, 0, 0});
        begin = hit + needle.size();
        if (special.attr & kAttrRstrip) {
          while (begin < end && is_ascii_space(text[begin])) ++begin;
        }
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  const std::vector<Fragment> fragments = partition(text, parse_special);
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos());

  if (spm_) {
    // SentencePiece sees a space before text that starts the input or
    // follows a special token (add_space_prefix), and spaces as U+2581.
    bool after_special = true;
    std::string raw;
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
        after_special = true;
        continue;
      }
      raw.clear();
      if (vocab_.add_space_prefix() && after_special) raw += ' ';
      raw.append(text.substr(f.offset, f.length));
      spm_->encode(replace_all(raw, " ", kSpmSpace), out);
      after_special = false;
    }
  } else {
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
      } else {
        bpe_->encode(text.substr(f.offset, f.length), out);
      }
    }
  }

  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos());
  return out;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool render_special) const {
  std::string text;
  // The first piece loses one leading space: the one the SPM encoder added.
  bool strip_space = vocab_.add_space_prefix();
  for (const TokenId id : ids) {
    const std::string piece = token_to_piece(id, render_special);
    if (strip_space && !piece.empty() && piece[0] == ' ') {
      text.append(piece, 1, std::string::npos);
    } else {
      text += piece;
    }
    strip_space = false;
  }
  if (vocab_.clean_spaces()) clean_up_tokenization_spaces(text);
  return text;
}

}  // namespace shoal
