// Blocks from real GGUF files, dequantized and dotted: F16 rows of
// llama-2-tiny-random, Q4_1 and Q8_0 rows of SmolLM2-135M-Instruct, Q4_K,
// Q6_K and Q5_0 rows of Qwen2.5-Coder-0.5B (Q4_K_M). The tensor bytes are
// found by a minimal GGUF header scan here, so this test does not depend on
// the project's GGUF reader. Expected row sums come from gguf-py 0.19
// (quants.dequantize) on the same files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "tensor/vec_dot.h"
#include "util/mapped_file.h"
#include "test_files.h"

namespace shoal {
namespace {

struct TensorBytes {
  DType type;
  std::vector<uint64_t> dims;  // dims[0] = values per row
  const uint8_t* data;
};

// Just enough of GGUF v2/v3 to find tensor data: skips every metadata value,
// reads the tensor infos, aligns the data section.
class MiniGguf {
 public:
  explicit MiniGguf(const MappedFile& file) : p_(file.data()), size_(file.size()) {
    if (u32() != 0x46554747u) throw std::runtime_error("not a GGUF file");
    u32();  // version
    const uint64_t n_tensors = u64(), n_kv = u64();
    uint64_t alignment = 32;
    for (uint64_t i = 0; i < n_kv; ++i) {
      const std::string key = str();
      const uint32_t type = u32();
      if (key == "general.alignment" && type == 4) {
        alignment = u32();
      } else {
        skip(type);
      }
    }
    struct Info {
      std::string name;
      TensorBytes t;
      uint64_t offset;
    };
    std::vector<Info> infos;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      Info info{str(), {}, 0};
      info.t.dims.resize(u32());
      for (auto& d : info.t.dims) d = u64();
      info.t.type = static_cast<DType>(u32());
      info.offset = u64();
      infos.push_back(info);
    }
    const uint64_t data_start = (pos_ + alignment - 1) / alignment * alignment;
    for (auto& info : infos) {
      if (data_start + info.offset > size_) throw std::runtime_error("tensor past end of file");
      info.t.data = p_ + data_start + info.offset;
      tensors_[info.name] = info.t;
    }
  }
  const TensorBytes& at(const std::string& name) const { return tensors_.at(name); }

 private:
  void need(uint64_t n) const {
    if (pos_ + n > size_) throw std::runtime_error("truncated GGUF header");
  }
  template <typename T>
  T read() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32() { return read<uint32_t>(); }
  uint64_t u64() { return read<uint64_t>(); }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }
  void skip(uint32_t type) {
    static const int kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};  // by GGUF value type
    if (type == 8) {
      str();
    } else if (type == 9) {
      const uint32_t elem = u32();
      const uint64_t count = u64();
      for (uint64_t i = 0; i < count; ++i) skip(elem);
    } else if (type < 13) {
      need(kSize[type]);
      pos_ += kSize[type];
    } else {
      throw std::runtime_error("bad GGUF value type");
    }
  }

  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::map<std::string, TensorBytes> tensors_;
};

struct RowCheck {
  std::string tensor;
  uint64_t row;
  double sum;           // sum of the row's values (gguf-py)
  double weighted_sum;  // sum of x[k] * ((k % 7) - 3)
  double first;
};

// Dequantizes the rows against gguf-py's numbers, then checks vec_dot vs
// vec_dot_reference vs a double dot of the dequantized rows on every row of
// each listed tensor (up to max_rows).
void check_file(const std::string& path, const std::vector<RowCheck>& checks, int max_rows) {
  const MappedFile file(path);
  const MiniGguf gguf(file);
  for (const RowCheck& c : checks) {
    SCOPED_TRACE(c.tensor + " row " + std::to_string(c.row));
    const TensorBytes& t = gguf.at(c.tensor);
    const int64_t n = static_cast<int64_t>(t.dims[0]);
    std::vector<float> x(static_cast<size_t>(n));
    dequantize_row(t.type, t.data + c.row * row_bytes(t.type, n), x.data(), n);
    double sum = 0, weighted = 0, abs_sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      sum += x[k];
      weighted += x[k] * ((k % 7) - 3);
      abs_sum += std::fabs(x[k]);
    }
    EXPECT_EQ(x[0], c.first);
    EXPECT_NEAR(sum, c.sum, 1e-9 * abs_sum);
    EXPECT_NEAR(weighted, c.weighted_sum, 1e-9 * abs_sum * 3);

    std::mt19937 rng(static_cast<uint32_t>(c.row));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> a(static_cast<size_t>(n)), a_deq(static_cast<size_t>(n));
    for (auto& v : a) v = normal(rng);
    const DType act = activation_dtype(t.type);
    std::vector<uint8_t> aq(row_bytes(act, n));
    quantize_activation(t.type, a.data(), aq.data(), n);
    dequantize_row(act, aq.data(), a_deq.data(), n);
    const uint64_t rows = std::min<uint64_t>(t.dims[1], static_cast<uint64_t>(max_rows));
    for (uint64_t r = 0; r < rows; ++r) {
      const uint8_t* w = t.data + r * row_bytes(t.type, n);
      dequantize_row(t.type, w, x.data(), n);
      double exact = 0, magnitude = 0;
      for (int64_t k = 0; k < n; ++k) {
        ASSERT_TRUE(std::isfinite(x[k])) << "row " << r << " value " << k;
        exact += double(x[k]) * a_deq[k];
        magnitude += std::fabs(double(x[k]) * a_deq[k]);
      }
      const float ref = vec_dot_reference(t.type, w, aq.data(), n);
      const float simd = vec_dot(t.type, w, aq.data(), n);
      ASSERT_LE(std::fabs(ref - exact), 2e-6 * magnitude) << "row " << r;
      ASSERT_LE(std::fabs(simd - ref), 2e-6 * magnitude) << "row " << r;
    }
  }
}

TEST(TensorRealFile, F16RowsOfTinyLlama) {
  const std::string path = testing::test_data_dir() + "/models/llama-2-tiny-random.gguf";
  SHOAL_NEED_FILE(path);
  check_file(path,
             {
                 {"token_embd.weight", 31999, -0.040798187255859375, -0.04776954650878906, 0.0030269622802734375},
                 {"blk.0.ffn_down.weight", 3, 0.03883242607116699, 0.0900118350982666, 0.01119232177734375},
             },
             4096);
}

// A model from scripts/fetch-models.
std::string model_path(const std::string& file) { return testing::models_dir() + "/" + file; }

TEST(TensorRealFile, Q4_1AndQ8_0RowsOfSmolLM2) {
  const std::string path = model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
  SHOAL_NEED_FILE(path);
  check_file(path,
             {
                 {"token_embd.weight", 1, 0.35922718048095703, -0.1973590850830078, -0.0238037109375},
                 {"token_embd.weight", 1000, 1.9784250259399414, 5.489996910095215, -0.1119384765625},
                 {"token_embd.weight", 49151, -0.4662208557128906, -4.756385803222656, 0.011505126953125},
                 {"blk.0.attn_q.weight", 5, -3.731201171875, -11.10546875, 0.076171875},
                 {"blk.0.ffn_down.weight", 100, -1.250030517578125, -0.0079803466796875, 0.00957489013671875},
                 {"blk.29.attn_v.weight", 7, 4.385498046875, 2.66082763671875, 0.0439453125},
             },
             256);
}

TEST(TensorRealFile, KQuantAndQ5_0RowsOfQwen25) {
  const std::string path = model_path("Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf");
  SHOAL_NEED_FILE(path);
  check_file(path,
             {
                 {"blk.0.ffn_down.weight", 3, 0.5779253244400024, 0.08353626728057861, -0.025343656539916992},
                 {"blk.11.ffn_down.weight", 17, 0.08159756660461426, 0.6696026921272278, -0.006913661956787109},
                 {"blk.0.attn_q.weight", 9, 0.15828704833984375, 1.1199798583984375, 0.00501251220703125},
                 {"token_embd.weight", 151935, -0.1703948974609375, 1.2154006958007812, 0.0193023681640625},
             },
             128);
}

}  // namespace
}  // namespace shoal
