#include "cluster/wire/model_config_json.h"

#include "cluster/wire/protocol.h"
#include "util/error.h"

namespace shoal::wire {
namespace {

const char* activation_name(Activation a) { return a == Activation::GeluTanh ? "gelu_tanh" : "silu"; }

Activation activation_named(const std::string& s) {
  if (s == "silu") return Activation::Silu;
  if (s == "gelu_tanh") return Activation::GeluTanh;
  throw ProtocolError(ErrorCode::BadRequest, "LOAD_STAGE config: unknown activation '" + s + "'");
}

}  // namespace

// The block is described by its data (the layer's tensors, activation,
// rope, per-layer settings), not by the architecture's name: a worker runs
// any architecture whose blocks it can compute.
nlohmann::json config_to_json(const ModelConfig& c) {
  nlohmann::json tensors = nlohmann::json::array(), layers = nlohmann::json::array();
  for (TensorKind k : c.layer_tensors) tensors.push_back(tensor_spec(k).name);
  for (const LayerSettings& l : c.layers) layers.push_back({l.window, l.rope_freq_base, l.rope_freq_scale});
  return {{"arch", c.arch},
          {"name", c.name},
          {"n_layer", c.n_layer},
          {"n_embd", c.n_embd},
          {"n_head", c.n_head},
          {"n_head_kv", c.n_head_kv},
          {"head_dim", c.head_dim},
          {"n_ff", c.n_ff},
          {"n_vocab", c.n_vocab},
          {"n_ctx_train", c.n_ctx_train},
          {"rope_dim", c.rope_dim},
          {"rope_neox", c.rope_style == RopeStyle::Neox},
          {"activation", activation_name(c.activation)},
          {"norm_eps", c.norm_eps},
          {"attn_scale", c.attn_scale},
          {"embd_scale", c.embd_scale},
          {"logit_softcap", c.logit_softcap},
          {"tied_output", c.tied_output},
          {"rope_freq_factors", c.rope_freq_factors},
          {"n_expert", c.n_expert},
          {"n_expert_used", c.n_expert_used},
          {"n_ff_exp", c.n_ff_exp},
          {"expert_weights_scale", c.expert_weights_scale},
          {"layer_tensors", tensors},
          {"layers", layers}};
}

ModelConfig config_from_json(const nlohmann::json& j) {
  try {
    ModelConfig c;
    c.arch = j.at("arch").get<std::string>();
    c.name = j.at("name").get<std::string>();
    c.n_layer = j.at("n_layer").get<int>();
    c.n_embd = j.at("n_embd").get<int>();
    c.n_head = j.at("n_head").get<int>();
    c.n_head_kv = j.at("n_head_kv").get<int>();
    c.head_dim = j.at("head_dim").get<int>();
    c.n_ff = j.at("n_ff").get<int>();
    c.n_vocab = j.at("n_vocab").get<int>();
    c.n_ctx_train = j.at("n_ctx_train").get<int>();
    c.rope_dim = j.at("rope_dim").get<int>();
    c.rope_style = j.at("rope_neox").get<bool>() ? RopeStyle::Neox : RopeStyle::Interleaved;
    c.activation = activation_named(j.at("activation").get<std::string>());
    c.norm_eps = j.at("norm_eps").get<float>();
    c.attn_scale = j.at("attn_scale").get<float>();
    c.embd_scale = j.at("embd_scale").get<float>();
    c.logit_softcap = j.at("logit_softcap").get<float>();
    c.tied_output = j.at("tied_output").get<bool>();
    c.rope_freq_factors = j.at("rope_freq_factors").get<bool>();
    c.n_expert = j.at("n_expert").get<int>();
    c.n_expert_used = j.at("n_expert_used").get<int>();
    c.n_ff_exp = j.at("n_ff_exp").get<int>();
    c.expert_weights_scale = j.at("expert_weights_scale").get<float>();
    for (const auto& name : j.at("layer_tensors")) {
      const auto kind = layer_kind_named(name.get<std::string>());
      if (!kind)
        throw ProtocolError(ErrorCode::BadRequest,
                            "LOAD_STAGE config: this worker cannot compute layers with '" + name.get<std::string>() +
                                "' (it may be older than the primary)");
      c.layer_tensors.push_back(*kind);
    }
    const auto& layers = j.at("layers");
    if (!layers.is_array() || layers.size() > 4096) throw ProtocolError(ErrorCode::Malformed, "LOAD_STAGE config: bad layers");
    for (const auto& l : layers) c.layers.push_back({l.at(0).get<int>(), l.at(1).get<float>(), l.at(2).get<float>()});
    c.validate();
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(ErrorCode::Malformed, std::string("LOAD_STAGE config: ") + e.what());
  } catch (const ProtocolError&) {
    throw;
  } catch (const Error& e) {
    throw ProtocolError(ErrorCode::Malformed, std::string("LOAD_STAGE config has impossible values: ") + e.what());
  }
}

}  // namespace shoal::wire
