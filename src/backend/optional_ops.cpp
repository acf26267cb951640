// What a backend does with an optional op it does not run: a clear error
// (LocalStage refuses such a stage at load, so this is a backstop).
#include "backend/backend.h"
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
void Backend::sigmoid_mul(DevicePtr, DevicePtr, int64_t) { lacks(*this, OptionalOp::SigmoidMul); }
void Backend::split_halves(DevicePtr, int64_t, int, DevicePtr, DevicePtr) { lacks(*this, OptionalOp::SplitHalves); }
void Backend::route_experts(DevicePtr, int, int, int, float, DevicePtr, DevicePtr) {
  fail("the {} backend does not route experts on the device", name());
}
void Backend::matmul_routed(const Matrix&, int64_t, DevicePtr, int, DevicePtr, DevicePtr, int) {
  fail("the {} backend does not route experts on the device", name());
}
void Backend::weighted_sum(DevicePtr, DevicePtr, int, int, int, DevicePtr) {
  fail("the {} backend does not route experts on the device", name());
}
void Backend::swiglu_oai(DevicePtr, DevicePtr, DevicePtr, int64_t) { lacks(*this, OptionalOp::SwigluOai); }

}  // namespace shoal
