#pragma once
// Activations on the wire: f32 by default (bit-exact), or f16 / bf16 / q8_0
// as measured options that trade accuracy for bytes.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shoal::wire {

enum class WireDType : uint8_t { F32 = 0, F16 = 1, BF16 = 2, Q8_0 = 3, COUNT };

WireDType parse_wire_dtype(const std::string& name);  // throws shoal::Error
const char* wire_dtype_name(WireDType t);
// Bytes of n rows of width values; throws if q8_0 and width % 32 != 0.
size_t wire_bytes(WireDType t, int64_t n_rows, int64_t width);
// rows [n][width] f32 → out (resized). For F32 callers send the floats as they are instead.
void encode_activations(WireDType t, const float* rows, int64_t n_rows, int64_t width, std::vector<uint8_t>& out);
// in (wire_bytes long) → rows [n][width] f32.
void decode_activations(WireDType t, const uint8_t* in, int64_t n_rows, int64_t width, float* rows);

// FORWARD's rows out (strictly ascending) of rows [*][width]: moved to the
// front in order before they are sent, and back to their places when they
// arrive. Neither overwrites a row before it has moved.
void pack_rows(float* rows, int64_t width, std::span<const int32_t> rows_out);
void unpack_rows(float* rows, int64_t width, std::span<const int32_t> rows_out);

}  // namespace shoal::wire
