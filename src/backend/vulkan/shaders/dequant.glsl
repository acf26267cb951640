// One 32-value chunk of a weight row, dequantized from its GGUF blocks into
// v: the matmul and the embedding lookup read weights through this, one
// TYPE_* per build. The includer declares the weights as `uint w[]`.
// A shader that must give the host's bits (get_rows: an embedding row is the
// same on every backend) defines EXACT_DEQUANT, so no product is fused
// into the add that follows it, as the host's dequantizer rounds both.
float v[32];

#ifdef EXACT_DEQUANT
float mul_add(float a, float b, float c) {
  precise float r = a * b + c;
  return r;
}
#else
float mul_add(float a, float b, float c) { return a * b + c; }
#endif

// Chunk c of the row at byte `base`; a float row's values past `cols` are 0.
void load_chunk(uint base, uint c, uint cols) {
#if defined(TYPE_F32)
  for (uint k = 0; k < 32; ++k) {
    uint i = c * 32 + k;
    v[k] = i < cols ? uintBitsToFloat(U32(w, base + i * 4)) : 0.0;
  }
#elif defined(TYPE_F16)
  for (uint k = 0; k < 32; ++k) {
    uint i = c * 32 + k;
    v[k] = i < cols ? F16(w, base + i * 2) : 0.0;
  }
#elif defined(TYPE_BF16)
  for (uint k = 0; k < 32; ++k) {
    uint i = c * 32 + k;
    v[k] = i < cols ? uintBitsToFloat(U16(w, base + i * 2) << 16) : 0.0;
  }
#elif defined(TYPE_Q4_0)
  uint b = base + c * 18;
  float d = F16(w, b);
  for (uint k = 0; k < 16; ++k) {
    uint q = BYTE(w, b + 2 + k);
    v[k] = (float(q & 15u) - 8.0) * d;
    v[k + 16] = (float(q >> 4) - 8.0) * d;
  }
#elif defined(TYPE_Q4_1)
  uint b = base + c * 20;  // 4-byte aligned: whole words
  const vec2 dm = unpackHalf2x16(w[b >> 2]);
  for (uint j = 0; j < 4; ++j) {
    const uint q = w[(b >> 2) + 1 + j];
    for (uint i = 0; i < 4; ++i) {
      const uint byte_ = (q >> (8 * i)) & 0xFFu;
      v[j * 4 + i] = mul_add(float(byte_ & 15u), dm.x, dm.y);
      v[j * 4 + i + 16] = mul_add(float(byte_ >> 4), dm.x, dm.y);
    }
  }
#elif defined(TYPE_Q5_0)
  uint b = base + c * 22;
  float d = F16(w, b);
  uint qh = U32(w, b + 2);
  for (uint k = 0; k < 16; ++k) {
    uint q = BYTE(w, b + 6 + k);
    v[k] = (float((q & 15u) | (((qh >> k) & 1u) << 4)) - 16.0) * d;
    v[k + 16] = (float((q >> 4) | (((qh >> (k + 16)) & 1u) << 4)) - 16.0) * d;
  }
#elif defined(TYPE_Q5_1)
  uint b = base + c * 24;
  float d = F16(w, b), m = F16(w, b + 2);
  uint qh = U32(w, b + 4);
  for (uint k = 0; k < 16; ++k) {
    uint q = BYTE(w, b + 8 + k);
    v[k] = mul_add(float((q & 15u) | (((qh >> k) & 1u) << 4)), d, m);
    v[k + 16] = mul_add(float((q >> 4) | (((qh >> (k + 16)) & 1u) << 4)), d, m);
  }
#elif defined(TYPE_Q8_0)
  uint b = base + c * 34;
  float d = F16(w, b);
  for (uint k = 0; k < 32; ++k) v[k] = float(I8(w, b + 2 + k)) * d;
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#if defined(TYPE_Q4_K)
  const uint block_bytes = 144, qs_at = 16;
#else
  const uint block_bytes = 176, qs_at = 48;
#endif
  uint j = c % 8;
  uint b = base + (c / 8) * block_bytes;
  float d = F16(w, b), dmin = F16(w, b + 2);
  uint s = b + 4;  // 12 bytes of 6-bit scales and mins
  uint sc, mn;
  if (j < 4) {
    sc = BYTE(w, s + j) & 63u;
    mn = BYTE(w, s + j + 4) & 63u;
  } else {
    sc = (BYTE(w, s + j + 4) & 15u) | ((BYTE(w, s + j - 4) >> 6) << 4);
    mn = (BYTE(w, s + j + 4) >> 4) | ((BYTE(w, s + j) >> 6) << 4);
  }
  float d1 = d * float(sc), m1 = dmin * float(mn);
  uint qs = b + qs_at + (j / 2) * 32;
  uint shift = (j & 1u) * 4;
  for (uint l = 0; l < 32; ++l) {
    uint q = (BYTE(w, qs + l) >> shift) & 15u;
#if defined(TYPE_Q5_K)
    q |= ((BYTE(w, b + 16 + l) >> j) & 1u) << 4;
#endif
    v[l] = mul_add(d1, float(q), -m1);
  }
#elif defined(TYPE_Q6_K)
  uint j = c % 8;
  uint b = base + (c / 8) * 210;
  float d = F16(w, b + 208);
  uint half_ = j / 4, part = j % 4;
  uint ql = b + half_ * 64 + ((part & 1u) != 0u ? 32u : 0u);
  uint qh = b + 128 + half_ * 32;
  uint sc = b + 192 + half_ * 8 + part * 2;
  uint lo_shift = part >= 2u ? 4u : 0u;
  for (uint l = 0; l < 32; ++l) {
    uint q = ((BYTE(w, ql + l) >> lo_shift) & 15u) | (((BYTE(w, qh + l) >> (2u * part)) & 3u) << 4);
    v[l] = d * float(I8(w, sc + l / 16)) * (float(q) - 32.0);
  }
#else
#error "dequant.glsl needs a TYPE_* define"
#endif
}
