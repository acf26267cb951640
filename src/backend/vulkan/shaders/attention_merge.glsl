// Two softmax partials over disjoint runs of positions, merged: (m, l, acc)
// is a run's largest score, its sum of exp(score - m) and its V weighted by
// those. Attention splits a row's positions at fixed SPLIT_POSITIONS
// counted from its first visible one, and merges the splits' partials in
// order with these, whether one workgroup walked them all or each ran in
// its own (attention.comp, attention_combine.comp): the same operations in
// the same order, so the same bits whichever ran. `precise`: no product is
// fused into its sum, in either shader.
const uint SPLIT_POSITIONS = 512;

// The factors that bring the two partials to their common maximum; an empty
// partial (m = -inf) weighs 0 and leaves the other as it is.
void merge_factors(float m_total, float m_part, out float m, out float f_total, out float f_part) {
  if (isinf(m_part) && m_part < 0.0) {
    m = m_total;
    f_total = 1.0;
    f_part = 0.0;
  } else if (isinf(m_total) && m_total < 0.0) {
    m = m_part;
    f_total = 0.0;
    f_part = 1.0;
  } else {
    m = max(m_total, m_part);
    f_total = exp(m_total - m);
    f_part = exp(m_part - m);
  }
}

float merged(float total, float f_total, float part, float f_part) {
  precise float r = total * f_total + part * f_part;
  return r;
}
