#pragma once
// A reranker's ranking head, as llama.cpp reads it for a causal LM whose
// GGUF says pooling_type rank (Qwen3-Reranker as convert_hf_to_gguf writes
// it: the lm_head rows of its "yes" and "no" answers as cls.output): the
// last prompt token's row after the output norm, times cls.output.weight
// (plus cls.output.bias where there is one), a softmax over the outputs for
// qwen3; the score is the first output. Read from the GGUF on the primary:
// a few rows, dequantized to floats once.
#include <memory>
#include <span>
#include <vector>

#include "gguf/reader.h"
#include "model/config.h"

namespace shoal {

class RankHead {
 public:
  // Null when the GGUF does not say pooling_type rank. Throws shoal::Error
  // for a rank model whose head this does not read (BERT-style heads with
  // cls.weight, a missing or misshapen cls.output), naming what is missing.
  static std::unique_ptr<RankHead> from_gguf(const gguf::File& file, const ModelConfig& config);

  // The score of the pooled row (n_embd values, not normalised).
  float score(std::span<const float> row) const;
  int n_outputs() const { return n_out_; }

 private:
  int n_embd_ = 0, n_out_ = 0;
  std::vector<float> weight_;  // [n_out][n_embd]
  std::vector<float> bias_;    // [n_out], or empty
  bool softmax_ = false;
};

}  // namespace shoal
