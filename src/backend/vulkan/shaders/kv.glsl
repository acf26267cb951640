// Reading one value of a KV cache row (F32, F16 or Q8_0 at a byte offset).
const uint KV_F32 = 0, KV_F16 = 1, KV_Q8_0 = 2;

// A half at an even byte offset, in one load.
#define KV_HALF(buf, o) unpackHalf2x16(buf[(o) >> 2] >> (((o) & 2u) << 3)).x

#define KV_VALUE(buf, type, row, i)                                                             \
  ((type) == KV_F32   ? uintBitsToFloat(buf[((row) >> 2) + (i)])                                \
   : (type) == KV_F16 ? KV_HALF(buf, (row) + (i) * 2u)                                          \
                      : F16(buf, (row) + ((i) >> 5) * 34u) * float(I8(buf, (row) + ((i) >> 5) * 34u + 2u + ((i) & 31u))))
