// llama-server's /infill request: the fields that are its own, read and
// checked (infill_prompt.h); no model is needed for this.
#include <fmt/format.h>

#include "server/infill_prompt.h"
#include "server/request_errors.h"

namespace shoal::server {
namespace {

// where: the object's own path ("input_extra[2]"), empty for the body.
std::string text_field(const nlohmann::json& body, const char* key, bool required, const std::string& where = {}) {
  const std::string name = where.empty() ? key : where + "." + key;
  const nlohmann::json* v = field(body, key);
  if (!v) {
    if (required) missing_parameter(name);
    return {};
  }
  if (!v->is_string()) bad_value(name, "expected a string.");
  return v->get<std::string>();
}

}  // namespace

InfillInput take_infill_input(nlohmann::json& body) {
  InfillInput in;
  in.prefix = text_field(body, "input_prefix", true);
  in.suffix = text_field(body, "input_suffix", true);
  in.prompt = text_field(body, "prompt", false);
  if (auto it = body.find("input_extra"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) bad_value("input_extra", "expected an array of {\"filename\": string, \"text\": string}.");
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& chunk = (*it)[i];
      const std::string at = fmt::format("input_extra[{}]", i);
      if (!chunk.is_object()) bad_value(at, "expected {\"filename\": string, \"text\": string}.");
      const std::string text = text_field(chunk, "text", true, at);
      auto name = chunk.find("filename");
      if (name != chunk.end() && !name->is_string()) bad_value(at + ".filename", "expected a string.");
      in.extra.emplace_back(name == chunk.end() ? "tmp" : name->get<std::string>(), text);
    }
  }
  for (const char* key : {"input_prefix", "input_suffix", "input_extra", "prompt"}) body.erase(key);
  return in;
}

}  // namespace shoal::server
