#include "cluster/wire/model_config_json.h"

#include "cluster/wire/protocol.h"

namespace shoal::wire {

nlohmann::json config_to_json(const ModelConfig& c) {
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
          {"rope_freq_base", c.rope_freq_base},
          {"rope_freq_scale", c.rope_freq_scale},
          {"rope_neox", c.rope_style == RopeStyle::Neox},
          {"norm_eps", c.norm_eps},
          {"qkv_bias", c.qkv_bias},
          {"tied_output", c.tied_output},
          {"rope_freq_factors", c.rope_freq_factors}};
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
    c.rope_freq_base = j.at("rope_freq_base").get<float>();
    c.rope_freq_scale = j.at("rope_freq_scale").get<float>();
    c.rope_style = j.at("rope_neox").get<bool>() ? RopeStyle::Neox : RopeStyle::Interleaved;
    c.norm_eps = j.at("norm_eps").get<float>();
    c.qkv_bias = j.at("qkv_bias").get<bool>();
    c.tied_output = j.at("tied_output").get<bool>();
    c.rope_freq_factors = j.at("rope_freq_factors").get<bool>();
    const bool sane = c.n_layer > 0 && c.n_layer <= 4096 && c.n_embd > 0 && c.n_embd <= 65536 && c.n_head > 0 &&
                      c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0 && c.head_dim > 0 && c.head_dim <= 512 &&
                      c.head_dim % 2 == 0 && c.n_ff > 0 && c.n_ff <= (1 << 20) && c.rope_dim > 0 &&
                      c.rope_dim <= c.head_dim && c.rope_dim % 2 == 0 && c.n_vocab > 0 && c.n_head <= 1024;
    if (!sane) throw ProtocolError(ErrorCode::Malformed, "LOAD_STAGE config has impossible dimensions");
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(ErrorCode::Malformed, std::string("LOAD_STAGE config: ") + e.what());
  }
}

}  // namespace shoal::wire
