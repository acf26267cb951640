#include "model/recurrent_state.h"

#include "util/error.h"

namespace shoal {

size_t RecurrentState::bytes_for(const ModelConfig& c, int begin, int end, int n_seq) {
  size_t layers = 0;
  for (int l = begin; l < end; ++l) layers += c.recurrent(l) ? 1 : 0;
  return layers * n_seq * (c.delta.conv_state_floats() + c.delta.ssm_state_floats()) * sizeof(float);
}

RecurrentState::RecurrentState(Backend& backend, const ModelConfig& c, int begin, int end, int n_seq)
    : conv_seq_bytes_(c.delta.conv_state_floats() * sizeof(float)),
      ssm_seq_bytes_(c.delta.ssm_state_floats() * sizeof(float)) {
  if (begin < 0 || end > c.n_layer || begin >= end)
    fail("bad layer range [{}, {}) for a model of {} layers", begin, end, c.n_layer);
  layers_.resize(end - begin);
  for (int l = begin; l < end; ++l) {
    if (!c.recurrent(l)) continue;
    layers_[l - begin].conv = backend.allocate(conv_seq_bytes_ * n_seq);
    layers_[l - begin].ssm = backend.allocate(ssm_seq_bytes_ * n_seq);
    bytes_ += (conv_seq_bytes_ + ssm_seq_bytes_) * n_seq;
  }
}

RecurrentLayer RecurrentState::layer(int index) const {
  const Layer& l = layers_.at(index);
  if (!l.ssm) fail("internal: layer {} of the stage has no recurrent state", index);
  return RecurrentLayer{DevicePtr{l.conv.get(), 0}, DevicePtr{l.ssm.get(), 0}, conv_seq_bytes_, ssm_seq_bytes_};
}

}  // namespace shoal
