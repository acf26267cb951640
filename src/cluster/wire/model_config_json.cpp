#include "cluster/wire/model_config_json.h"

#include <array>
#include <tuple>

#include "cluster/wire/protocol.h"
#include "util/error.h"

namespace shoal::wire {
namespace {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::GeluTanh: return "gelu_tanh";
    case Activation::SiluOai: return "silu_oai";
    case Activation::Silu: break;
  }
  return "silu";
}

Activation activation_named(const std::string& s) {
  if (s == "silu") return Activation::Silu;
  if (s == "gelu_tanh") return Activation::GeluTanh;
  if (s == "silu_oai") return Activation::SiluOai;
  throw ProtocolError(ErrorCode::BadRequest, "LOAD_STAGE config: unknown activation '" + s + "'");
}

// The plain fields, by JSON name, in one list for both directions.
template <typename T>
struct Field {
  const char* name;
  T ModelConfig::*member;
};
using C = ModelConfig;
constexpr std::tuple kFields{
    std::array<Field<std::string>, 2>{{{"arch", &C::arch}, {"name", &C::name}}},
    std::array<Field<int>, 19>{{{"n_layer", &C::n_layer},
                                {"n_embd_per_layer", &C::n_embd_per_layer},
                                {"n_kv_shared", &C::n_kv_shared},
                                {"n_ff_shared", &C::n_ff_shared},
                                {"n_embd", &C::n_embd},
                                {"n_head", &C::n_head},
                                {"n_head_kv", &C::n_head_kv},
                                {"head_dim", &C::head_dim},
                                {"n_ff", &C::n_ff},
                                {"n_vocab", &C::n_vocab},
                                {"n_ctx_train", &C::n_ctx_train},
                                {"rope_dim", &C::rope_dim},
                                {"n_expert", &C::n_expert},
                                {"n_expert_used", &C::n_expert_used},
                                {"n_ff_exp", &C::n_ff_exp},
                                {"n_ff_shexp", &C::n_ff_shexp},
                                {"n_expert_groups", &C::n_expert_groups},
                                {"n_group_used", &C::n_group_used},
                                {"n_dense_lead", &C::n_dense_lead}}},
    std::array<Field<float>, 6>{{{"norm_eps", &C::norm_eps},
                                 {"router_input_scale", &C::router_input_scale},
                                 {"attn_scale", &C::attn_scale},
                                 {"embd_scale", &C::embd_scale},
                                 {"logit_softcap", &C::logit_softcap},
                                 {"expert_weights_scale", &C::expert_weights_scale}}},
    std::array<Field<bool>, 6>{{{"tied_output", &C::tied_output},
                                {"v_norm", &C::v_norm},
                                {"rope_freq_factors", &C::rope_freq_factors},
                                {"q_gate", &C::q_gate},
                                {"qk_norm_whole", &C::qk_norm_whole},
                                {"expert_weights_norm", &C::expert_weights_norm}}},
    std::array<Field<std::string>, 1>{{{"ffn_norm_name", &C::ffn_norm_name}}},
};

const char* layer_kind_name(LayerKind k) { return k == LayerKind::DeltaNet ? "delta_net" : "attention"; }

LayerKind layer_kind_of(const std::string& s) {
  if (s == "attention") return LayerKind::Attention;
  if (s == "delta_net") return LayerKind::DeltaNet;
  throw ProtocolError(ErrorCode::BadRequest, "LOAD_STAGE config: this worker cannot compute '" + s + "' layers");
}

nlohmann::json tensor_list(const std::vector<TensorKind>& kinds) {
  nlohmann::json out = nlohmann::json::array();
  for (TensorKind k : kinds) out.push_back(tensor_spec(k).name);
  return out;
}

std::vector<TensorKind> tensor_kinds(const nlohmann::json& names) {
  std::vector<TensorKind> out;
  for (const auto& name : names) {
    const auto kind = layer_kind_named(name.get<std::string>());
    if (!kind)
      throw ProtocolError(ErrorCode::BadRequest, "LOAD_STAGE config: this worker cannot compute layers with '" +
                                                     name.get<std::string>() + "' (it may be older than the primary)");
    out.push_back(*kind);
  }
  return out;
}

template <typename Visit>
void for_each_field(Visit visit) {
  std::apply([&](const auto&... lists) { (..., [&](const auto& list) { for (const auto& f : list) visit(f); }(lists)); },
             kFields);
}

}  // namespace

// The block is described by its data (the layer's tensors, activation,
// rope, per-layer settings), not by the architecture's name: a worker runs
// any architecture whose blocks it can compute.
nlohmann::json config_to_json(const ModelConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for_each_field([&](const auto& f) { j[f.name] = c.*f.member; });
  j["rope_neox"] = c.rope_style == RopeStyle::Neox;
  j["activation"] = activation_name(c.activation);
  j["layer_tensors"] = tensor_list(c.layer_tensors);
  j["recurrent_tensors"] = tensor_list(c.recurrent_tensors);
  j["lead_tensors"] = tensor_list(c.lead_tensors);
  j["global_tensors"] = tensor_list(c.global_tensors);
  j["reuse_tensors"] = tensor_list(c.reuse_tensors);
  j["window_geometry"] = {c.window_geometry.n_head_kv, c.window_geometry.head_dim, c.window_geometry.rope_dim};
  j["expert_gating"] = c.expert_gating == ExpertGating::Sigmoid ? "sigmoid" : "softmax";
  j["latent_attention"] = {c.mla.q_lora_rank, c.mla.kv_lora_rank, c.mla.qk_nope, c.mla.v_head_dim};
  j["delta_net"] = {c.delta.conv_kernel, c.delta.head_dim, c.delta.n_k_heads, c.delta.n_v_heads,
                    c.delta.keys_interleaved};
  j["yarn"] = {c.yarn.ext_factor, c.yarn.attn_factor, c.yarn.beta_fast, c.yarn.beta_slow, c.yarn.orig_ctx};
  nlohmann::json& layers = j["layers"] = nlohmann::json::array();
  for (const LayerSettings& l : c.layers)
    layers.push_back({l.window, l.rope_freq_base, l.rope_freq_scale, layer_kind_name(l.kind)});
  return j;
}

ModelConfig config_from_json(const nlohmann::json& j) {
  try {
    ModelConfig c;
    for_each_field([&](const auto& f) { j.at(f.name).get_to(c.*f.member); });
    c.rope_style = j.at("rope_neox").get<bool>() ? RopeStyle::Neox : RopeStyle::Interleaved;
    c.activation = activation_named(j.at("activation").get<std::string>());
    c.layer_tensors = tensor_kinds(j.at("layer_tensors"));
    c.recurrent_tensors = tensor_kinds(j.at("recurrent_tensors"));
    c.lead_tensors = tensor_kinds(j.at("lead_tensors"));
    c.global_tensors = tensor_kinds(j.at("global_tensors"));
    c.reuse_tensors = tensor_kinds(j.at("reuse_tensors"));
    const auto& window = j.at("window_geometry");
    c.window_geometry = AttentionGeometry{window.at(0).get<int>(), window.at(1).get<int>(), window.at(2).get<int>()};
    const std::string gating = j.at("expert_gating").get<std::string>();
    if (gating != "softmax" && gating != "sigmoid")
      throw ProtocolError(ErrorCode::BadRequest, "LOAD_STAGE config: unknown expert gating '" + gating + "'");
    c.expert_gating = gating == "sigmoid" ? ExpertGating::Sigmoid : ExpertGating::Softmax;
    const auto& mla = j.at("latent_attention");
    c.mla = LatentAttentionShape{mla.at(0).get<int>(), mla.at(1).get<int>(), mla.at(2).get<int>(), mla.at(3).get<int>()};
    const auto& delta = j.at("delta_net");
    c.delta = DeltaNetShape{delta.at(0).get<int>(), delta.at(1).get<int>(), delta.at(2).get<int>(),
                            delta.at(3).get<int>(), delta.at(4).get<bool>()};
    const auto& yarn = j.at("yarn");
    c.yarn = RopeYarn{yarn.at(0).get<float>(), yarn.at(1).get<float>(), yarn.at(2).get<float>(),
                      yarn.at(3).get<float>(), yarn.at(4).get<int>()};
    const auto& layers = j.at("layers");
    if (!layers.is_array() || layers.size() > 4096) throw ProtocolError(ErrorCode::Malformed, "LOAD_STAGE config: bad layers");
    for (const auto& l : layers)
      c.layers.push_back({l.at(0).get<int>(), l.at(1).get<float>(), l.at(2).get<float>(),
                          layer_kind_of(l.at(3).get<std::string>())});
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
