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
// Fused, always: the matmul's two kernels must round a weight alike.
float mul_add(float a, float b, float c) { return fma(a, b, c); }
#endif

// The little-endian 32-bit word at byte o, o even (GGUF blocks keep 16-bit
// alignment): one load, or two where o is not on a word.
uint word_at(uint o) {
  const uint i = o >> 2;
  if ((o & 2u) == 0u) return w[i];
  return (w[i] >> 16) | (w[i + 1u] << 16);
}

// A run of bytes (a block, or the part of one a chunk reads) loaded as the
// words it touches, each once: word_at on every word of a run that starts
// mid-word would load each buffer word twice. On a CPU device every load
// is a scalar load per invocation, the cost that dominates the matmul.
const uint RUN_WORDS = 9;  // the most a run touches: Q8_0's 34-byte block
uint run[RUN_WORDS];
uint run_at;
void load_run(uint o, uint bytes) {
  const uint first = o >> 2, last = (o + bytes - 1u) >> 2;
  run_at = o;
  [[unroll]] for (uint k = 0; k < RUN_WORDS; ++k) {
    run[k] = 0u;
    if (first + k <= last) run[k] = w[first + k];
  }
}
// The word at byte f of the run (f even; a constant once the loops unroll,
// so every index into run[] is one).
uint run_word(uint f) {
  const uint g = (run_at & 2u) == 0u ? f : f + 2u;
  if ((g & 2u) == 0u) return run[g >> 2];
  return (run[g >> 2] >> 16) | (run[(g >> 2) + 1u] << 16);
}
uint byte_of(uint word, uint i) { return (word >> (8u * i)) & 0xFFu; }
float half_of(uint word, uint i) { return unpackHalf2x16(word >> (16u * i)).x; }

// Chunk c of the row at byte `base`; a float row's values past `cols` are 0.
void load_chunk(uint base, uint c, uint cols) {
#if defined(TYPE_F32)
  for (uint k = 0; k < 32; ++k) {
    uint i = c * 32 + k;
    v[k] = i < cols ? uintBitsToFloat(w[(base >> 2) + i]) : 0.0;
  }
#elif defined(TYPE_F16)
  for (uint k = 0; k < 32; k += 2) {
    uint i = c * 32 + k;
    const uint pair = i < cols ? word_at(base + i * 2) : 0u;
    v[k] = i < cols ? half_of(pair, 0) : 0.0;
    v[k + 1] = i + 1 < cols ? half_of(pair, 1) : 0.0;
  }
#elif defined(TYPE_BF16)
  for (uint k = 0; k < 32; k += 2) {
    uint i = c * 32 + k;
    const uint pair = i < cols ? word_at(base + i * 2) : 0u;
    v[k] = i < cols ? uintBitsToFloat(pair << 16) : 0.0;
    v[k + 1] = i + 1 < cols ? uintBitsToFloat(pair & 0xFFFF0000u) : 0.0;
  }
#elif defined(TYPE_Q4_0)
  load_run(base + c * 18, 18);
  float d = half_of(run_word(0), 0);
  [[unroll]] for (uint j = 0; j < 4; ++j) {
    const uint q4 = run_word(2 + 4 * j);
    [[unroll]] for (uint i = 0; i < 4; ++i) {
      const uint q = byte_of(q4, i), k = 4 * j + i;
      v[k] = (float(q & 15u) - 8.0) * d;
      v[k + 16] = (float(q >> 4) - 8.0) * d;
    }
  }
#elif defined(TYPE_Q4_1)
  uint b = base + c * 20;
  const uint dm = word_at(b);
  const float d = half_of(dm, 0), m = half_of(dm, 1);
  for (uint j = 0; j < 4; ++j) {
    const uint q4 = word_at(b + 4 + 4 * j);
    for (uint i = 0; i < 4; ++i) {
      const uint q = byte_of(q4, i), k = 4 * j + i;
      v[k] = mul_add(float(q & 15u), d, m);
      v[k + 16] = mul_add(float(q >> 4), d, m);
    }
  }
#elif defined(TYPE_Q5_0)
  load_run(base + c * 22, 22);
  float d = half_of(run_word(0), 0);
  uint qh = run_word(2);
  [[unroll]] for (uint j = 0; j < 4; ++j) {
    const uint q4 = run_word(6 + 4 * j);
    [[unroll]] for (uint i = 0; i < 4; ++i) {
      const uint q = byte_of(q4, i), k = 4 * j + i;
      v[k] = (float((q & 15u) | (((qh >> k) & 1u) << 4)) - 16.0) * d;
      v[k + 16] = (float((q >> 4) | (((qh >> (k + 16)) & 1u) << 4)) - 16.0) * d;
    }
  }
#elif defined(TYPE_Q5_1)
  uint b = base + c * 24;
  const uint dm = word_at(b);
  float d = half_of(dm, 0), m = half_of(dm, 1);
  uint qh = word_at(b + 4);
  for (uint j = 0; j < 4; ++j) {
    const uint q4 = word_at(b + 8 + 4 * j);
    for (uint i = 0; i < 4; ++i) {
      const uint q = byte_of(q4, i), k = 4 * j + i;
      v[k] = mul_add(float((q & 15u) | (((qh >> k) & 1u) << 4)), d, m);
      v[k + 16] = mul_add(float((q >> 4) | (((qh >> (k + 16)) & 1u) << 4)), d, m);
    }
  }
#elif defined(TYPE_Q8_0)
  load_run(base + c * 34, 34);
  float d = half_of(run_word(0), 0);
  [[unroll]] for (uint j = 0; j < 8; ++j) {
    const uint q4 = run_word(2 + 4 * j);
    [[unroll]] for (uint i = 0; i < 4; ++i) v[4 * j + i] = float(int(byte_of(q4, i) ^ 128u) - 128) * d;
  }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
#if defined(TYPE_Q4_K)
  const uint block_bytes = 144, qs_at = 16;
#else
  const uint block_bytes = 176, qs_at = 48;
#endif
  uint j = c % 8;
  uint b = base + (c / 8) * block_bytes;
  const uint dd = word_at(b);
  float d = half_of(dd, 0), dmin = half_of(dd, 1);
  // 12 bytes of 6-bit scales and mins at b + 4: bytes 0-3, 4-7, 8-11.
  const uint s0 = word_at(b + 4), s1 = word_at(b + 8), s2 = word_at(b + 12);
  uint sc, mn;
  if (j < 4) {
    sc = byte_of(s0, j) & 63u;
    mn = byte_of(s1, j) & 63u;
  } else {
    const uint hi = byte_of(s2, j - 4);  // byte j + 4
    sc = (hi & 15u) | ((byte_of(s0, j - 4) >> 6) << 4);
    mn = (hi >> 4) | ((byte_of(s1, j - 4) >> 6) << 4);
  }
  float d1 = d * float(sc), m1 = dmin * float(mn);
  uint qs = b + qs_at + (j / 2) * 32;
  uint shift = (j & 1u) * 4;
  for (uint l4 = 0; l4 < 8; ++l4) {
    const uint q4 = word_at(qs + 4 * l4);
#if defined(TYPE_Q5_K)
    const uint h4 = word_at(b + 16 + 4 * l4);
#endif
    for (uint i = 0; i < 4; ++i) {
      uint q = (byte_of(q4, i) >> shift) & 15u;
#if defined(TYPE_Q5_K)
      q |= ((byte_of(h4, i) >> j) & 1u) << 4;
#endif
      v[4 * l4 + i] = mul_add(d1, float(q), -m1);
    }
  }
#elif defined(TYPE_Q6_K)
  uint j = c % 8;
  uint b = base + (c / 8) * 210;
  float d = half_of(word_at(b + 208), 0);
  uint half_ = j / 4, part = j % 4;
  uint ql = b + half_ * 64 + ((part & 1u) != 0u ? 32u : 0u);
  uint qh = b + 128 + half_ * 32;
  const uint scales = word_at(b + 192 + half_ * 8 + part * 2);  // bytes 0 and 1: the scales of l < 16 and l >= 16
  const float s0 = d * float(int(byte_of(scales, 0) ^ 128u) - 128), s1 = d * float(int(byte_of(scales, 1) ^ 128u) - 128);
  uint lo_shift = part >= 2u ? 4u : 0u;
  // ql and qh are 32-byte runs with the block's alignment (210-byte blocks:
  // every other one starts mid-word): each buffer word loaded once.
  const bool mid = (b & 2u) != 0u;
  uint lo[9], hi[9];
  [[unroll]] for (uint k = 0; k < 8; ++k) {
    lo[k] = w[(ql >> 2) + k];
    hi[k] = w[(qh >> 2) + k];
  }
  lo[8] = 0u;
  hi[8] = 0u;
  if (mid) {
    lo[8] = w[(ql >> 2) + 8u];
    hi[8] = w[(qh >> 2) + 8u];
  }
  [[unroll]] for (uint l4 = 0; l4 < 8; ++l4) {
    const uint lo4 = mid ? (lo[l4] >> 16) | (lo[l4 + 1] << 16) : lo[l4];
    const uint hi4 = mid ? (hi[l4] >> 16) | (hi[l4 + 1] << 16) : hi[l4];
    for (uint i = 0; i < 4; ++i) {
      uint q = ((byte_of(lo4, i) >> lo_shift) & 15u) | (((byte_of(hi4, i) >> (2u * part)) & 3u) << 4);
      v[4 * l4 + i] = (l4 < 4 ? s0 : s1) * (float(q) - 32.0);
    }
  }
#else
#error "dequant.glsl needs a TYPE_* define"
#endif
}
