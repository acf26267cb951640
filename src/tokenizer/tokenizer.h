#pragma once
// The tokenizer of a GGUF model: text to token ids and back, matching
// llama.cpp's llama_tokenize / llama_token_to_piece / llama_detokenize
// exactly. Supports SentencePiece-style ("llama") and byte-level BPE ("gpt2")
// vocabularies. All methods are const and thread-safe.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/byte_trie.h"
#include "tokenizer/vocab.h"

namespace shoal {

namespace gguf {
class File;
}

class SpmTokenizer;
class BpeTokenizer;

class Tokenizer {
 public:
  // Throws shoal::Error on an unsupported or broken vocabulary (unknown
  // tokenizer model or pre-tokenizer type, duplicate tokens, ...).
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: BOS / EOS as the metadata asks (add_bos / add_eos).
  // parse_special: control-token text such as "<|im_start|>" in `text`
  // becomes that token; without it only user-defined tokens are cut out and
  // control-token text is tokenized as plain text (as in llama.cpp).
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes a token stands for: byte tokens give their byte, SPM's U+2581
  // gives ' ', BPE's byte-level characters give their bytes. Control and
  // unknown tokens give "" unless render_special. Throws shoal::Error for an
  // id outside the vocabulary.
  std::string token_to_piece(TokenId id, bool render_special = false) const;

  // Concatenated pieces, as llama.cpp's detokenize with remove_special=false:
  // the leading space the SPM encoder added is removed from the first piece,
  // and BPE vocabularies that ask for it get clean_up_tokenization_spaces.
  // The result may contain invalid UTF-8 if `ids` ends mid-character.
  std::string decode(const std::vector<TokenId>& ids, bool render_special = false) const;

  int n_vocab() const { return vocab_.size(); }
  TokenId bos() const { return vocab_.bos(); }  // kNoToken (-1) when absent
  TokenId eos() const { return vocab_.eos(); }
  bool add_bos() const { return vocab_.add_bos(); }
  bool add_eos() const { return vocab_.add_eos(); }
  // eos, eot, eom and the control tokens llama.cpp treats as the end of
  // generation (<|im_end|>, <|eot_id|>, <|endoftext|>, <end_of_turn>, ...).
  bool is_end_of_generation(TokenId id) const { return vocab_.is_eog(id); }
  bool is_control(TokenId id) const;  // control or unknown: hidden unless rendered

  // The token's text as stored in the vocabulary (byte-level / U+2581 form).
  // Throws shoal::Error for an id outside the vocabulary.
  const std::string& token_text(TokenId id) const;
  std::optional<TokenId> find_token(std::string_view text) const { return vocab_.find(text); }

  const Vocab& vocab() const { return vocab_; }

  // Every token's token_to_piece bytes as a trie, control tokens left out
  // (what a grammar may let through); built on first use, then shared.
  const grammar::ByteTrie& piece_trie() const;

 private:
  explicit Tokenizer(Vocab vocab);
  void check(TokenId id) const;

  struct Fragment {
    TokenId token;  // kNoToken: raw text [offset, offset + length)
    size_t offset;
    size_t length;
  };
  // Cuts special tokens out of the text (llama.cpp tokenizer_st_partition).
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  std::string render_piece(TokenId id) const;

  Vocab vocab_;
  std::unique_ptr<SpmTokenizer> spm_;
  std::unique_ptr<BpeTokenizer> bpe_;
  std::vector<std::string> pieces_;  // token_to_piece(id, true), built once
  mutable std::once_flag trie_once_;
  mutable std::unique_ptr<grammar::ByteTrie> trie_;
};

}  // namespace shoal
