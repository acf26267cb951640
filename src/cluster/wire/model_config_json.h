#pragma once
// ModelConfig on the wire (inside LOAD_STAGE): every field, checked on the
// way in as strictly as the GGUF reader checks the file.
#include <nlohmann/json.hpp>

#include "model/config.h"

namespace shoal::wire {

nlohmann::json config_to_json(const ModelConfig& c);
// Throws ProtocolError (Malformed) on a missing field, a wrong type or an
// impossible value.
ModelConfig config_from_json(const nlohmann::json& j);

}  // namespace shoal::wire
