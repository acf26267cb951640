#include "cluster/wire/activation_codec.h"

#include <cstring>

#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "tensor/vec_dot.h"
#include "util/error.h"

namespace shoal::wire {

WireDType parse_wire_dtype(const std::string& name) {
  for (int i = 0; i < static_cast<int>(WireDType::COUNT); ++i)
    if (name == wire_dtype_name(static_cast<WireDType>(i))) return static_cast<WireDType>(i);
  fail("unknown wire dtype '{}' (f32, f16, bf16 or q8_0)", name);
}

const char* wire_dtype_name(WireDType t) {
  switch (t) {
    case WireDType::F32: return "f32";
    case WireDType::F16: return "f16";
    case WireDType::BF16: return "bf16";
    case WireDType::Q8_0: return "q8_0";
    default: return "?";
  }
}

size_t wire_bytes(WireDType t, int64_t n_rows, int64_t width) {
  switch (t) {
    case WireDType::F32: return static_cast<size_t>(n_rows * width) * 4;
    case WireDType::F16:
    case WireDType::BF16: return static_cast<size_t>(n_rows * width) * 2;
    case WireDType::Q8_0:
      if (width % 32 != 0) fail("--wire-dtype q8_0 needs an embedding width that is a multiple of 32, not {}", width);
      return static_cast<size_t>(n_rows) * row_bytes(DType::Q8_0, width);
    default: fail("bad wire dtype {}", static_cast<int>(t));
  }
}

void encode_activations(WireDType t, const float* rows, int64_t n_rows, int64_t width, std::vector<uint8_t>& out) {
  out.resize(wire_bytes(t, n_rows, width));
  if (out.empty()) return;  // no rows (a result no one reads): nothing to copy from or to
  const int64_t n = n_rows * width;
  switch (t) {
    case WireDType::F32: std::memcpy(out.data(), rows, out.size()); return;
    case WireDType::F16: {
      auto* p = reinterpret_cast<uint16_t*>(out.data());
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16(rows[i]);
      return;
    }
    case WireDType::BF16: {
      auto* p = reinterpret_cast<uint16_t*>(out.data());
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &rows[i], 4);
        bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
        p[i] = static_cast<uint16_t>(bits >> 16);
      }
      return;
    }
    case WireDType::Q8_0: {
      const size_t stride = row_bytes(DType::Q8_0, width);
      for (int64_t r = 0; r < n_rows; ++r)
        quantize_activation(DType::Q8_0, rows + r * width, out.data() + r * stride, width);
      return;
    }
    default: fail("bad wire dtype");
  }
}

void decode_activations(WireDType t, const uint8_t* in, int64_t n_rows, int64_t width, float* rows) {
  if (n_rows == 0) return;
  switch (t) {
    case WireDType::F32: std::memcpy(rows, in, wire_bytes(t, n_rows, width)); return;
    case WireDType::F16: dequantize_row(DType::F16, in, rows, n_rows * width); return;
    case WireDType::BF16: dequantize_row(DType::BF16, in, rows, n_rows * width); return;
    case WireDType::Q8_0: {
      const size_t stride = row_bytes(DType::Q8_0, width);
      for (int64_t r = 0; r < n_rows; ++r) dequantize_row(DType::Q8_0, in + r * stride, rows + r * width, width);
      return;
    }
    default: fail("bad wire dtype");
  }
}

void pack_rows(float* rows, int64_t width, std::span<const int32_t> rows_out) {
  for (size_t i = 0; i < rows_out.size(); ++i)  // row rows_out[i] >= i: the first first
    if (rows_out[i] != static_cast<int32_t>(i))
      std::memcpy(rows + i * width, rows + rows_out[i] * width, width * sizeof(float));
}

void unpack_rows(float* rows, int64_t width, std::span<const int32_t> rows_out) {
  for (size_t i = rows_out.size(); i-- > 0;)  // the last first
    if (rows_out[i] != static_cast<int32_t>(i))
      std::memcpy(rows + rows_out[i] * width, rows + i * width, width * sizeof(float));
}

}  // namespace shoal::wire
