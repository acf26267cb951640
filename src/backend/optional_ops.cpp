// Backend's defaults for the optional ops: those with a host form run it;
// the others give a clear error (LocalStage refuses such a stage at load,
// so that is a backstop).
#include <vector>

#include "backend/backend.h"
#include "backend/scalar_activations.h"
#include "util/error.h"

namespace shoal {

const char* optional_op_name(OptionalOp op) {
  switch (op) {
    case OptionalOp::DeltaNet: return "gated_delta_net";
    case OptionalOp::SigmoidMul: return "sigmoid_mul";
    case OptionalOp::SplitHalves: return "split_halves";
    case OptionalOp::AttentionSinks: return "attention_sinks";
    case OptionalOp::SwigluOai: return "swiglu_oai";
    case OptionalOp::LatentAttention: return "latent_attention";
    case OptionalOp::PlainNorm: return "rms_norm without a weight";
  }
  return "?";
}

namespace {
[[noreturn]] void lacks(const Backend& be, OptionalOp op) {
  fail("the {} backend does not run {}", be.name(), optional_op_name(op));
}
}  // namespace

void Backend::delta_net(DevicePtr, DevicePtr, DevicePtr, const RecurrentLayer&, const DeltaNetParams&, int, DevicePtr) {
  lacks(*this, OptionalOp::DeltaNet);
}
namespace {
// out[i] = f(a[i], b[i]) through the host: correct on any device that can
// upload and download, and slow (a GPU overrides the ops that use it).
template <class F>
void through_host(Backend& be, DevicePtr a, DevicePtr b, DevicePtr out, int64_t n, F f) {
  std::vector<float> as(static_cast<size_t>(n)), bs(static_cast<size_t>(n));
  be.download(as.data(), a, as.size() * sizeof(float));
  be.download(bs.data(), b, bs.size() * sizeof(float));
  for (size_t i = 0; i < as.size(); ++i) as[i] = f(as[i], bs[i]);
  be.upload(out, as.data(), as.size() * sizeof(float));
}
}  // namespace

void Backend::sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) {
  through_host(*this, x, gate, x, n, [](float v, float g) { return v * sigmoid(g); });
}
void Backend::split_halves(DevicePtr src, int64_t n_rows, int half, DevicePtr a, DevicePtr b) {
  copy_rows(a, half, src, 2 * int64_t{half}, half, n_rows);
  copy_rows(b, half, src + half, 2 * int64_t{half}, half, n_rows);
}
void Backend::route_experts(DevicePtr, int, int, int, float, DevicePtr, DevicePtr) {
  fail("the {} backend does not route experts on the device", name());
}
void Backend::matmul_routed(const Matrix&, int64_t, DevicePtr, int, DevicePtr, DevicePtr, int) {
  fail("the {} backend does not route experts on the device", name());
}
void Backend::weighted_sum(DevicePtr, DevicePtr, int, int, int, DevicePtr) {
  fail("the {} backend does not route experts on the device", name());
}
void Backend::swiglu_oai(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) {
  through_host(*this, gate, up, out, n, clamped_swiglu);
}

}  // namespace shoal
