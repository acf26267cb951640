#include "engine/rank_head.h"

#include <algorithm>
#include <cmath>

#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace shoal {
namespace {

constexpr int64_t kRankPooling = 4;  // llama.cpp's LLAMA_POOLING_TYPE_RANK

std::vector<float> rows_of(const gguf::TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  const size_t stride = row_bytes(t.type, t.row_length());
  for (int64_t r = 0; r < t.n_rows(); ++r)
    dequantize_row(t.type, t.data + static_cast<size_t>(r) * stride, out.data() + r * t.row_length(), t.row_length());
  return out;
}

}  // namespace

std::unique_ptr<RankHead> RankHead::from_gguf(const gguf::File& file, const ModelConfig& config) {
  if (file.get_int(config.arch + ".pooling_type", 0) != kRankPooling) return nullptr;
  if (file.find_tensor("cls.weight"))
    fail("{}: a ranking head with a dense layer before its output (cls.weight: BERT-style rerankers) is not read",
         file.path());
  const gguf::TensorInfo* out = file.find_tensor("cls.output.weight");
  if (!out) fail("{}: pooling_type is rank but there is no cls.output.weight to score with", file.path());
  if (out->shape.size() != 2 || out->row_length() != config.n_embd || out->n_rows() < 1)
    fail("{}: cls.output.weight should be [{}, outputs], but is shaped otherwise", file.path(), config.n_embd);
  auto head = std::unique_ptr<RankHead>(new RankHead());
  head->n_embd_ = static_cast<int>(config.n_embd);
  head->n_out_ = static_cast<int>(out->n_rows());
  head->weight_ = rows_of(*out);
  if (const gguf::TensorInfo* bias = file.find_tensor("cls.output.bias")) {
    if (bias->n_elements() != head->n_out_) fail("{}: cls.output.bias has {} values for {} outputs", file.path(),
                                                 bias->n_elements(), head->n_out_);
    head->bias_ = rows_of(*bias);
  }
  // As llama.cpp's graph: a probability over the labels for qwen3.
  head->softmax_ = config.arch == "qwen3";
  return head;
}

float RankHead::score(std::span<const float> row) const {
  std::vector<double> out(static_cast<size_t>(n_out_));
  for (int o = 0; o < n_out_; ++o) {
    const float* w = weight_.data() + static_cast<size_t>(o) * n_embd_;
    double sum = bias_.empty() ? 0.0 : bias_[o];
    for (int i = 0; i < n_embd_; ++i) sum += static_cast<double>(w[i]) * row[i];
    out[o] = sum;
  }
  if (softmax_) {
    const double top = *std::max_element(out.begin(), out.end());
    double total = 0;
    for (double& v : out) total += v = std::exp(v - top);
    for (double& v : out) v /= total;
  }
  return static_cast<float>(out[0]);
}

}  // namespace shoal
