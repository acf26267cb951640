// libFuzzer: bytes as a chat template (a GGUF's tokenizer.chat_template is
// whatever its author wrote), parsed and rendered within small limits.
// Nothing may crash or hang; a bad template is a TemplateError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "jinja/error.h"
#include "jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  shoal::jinja::Limits limits;
  limits.max_seconds = 0.5;
  limits.max_output_bytes = 1 << 16;
  limits.max_range = 1 << 12;
  try {
    shoal::jinja::Template t(source);
    t.render(nlohmann::ordered_json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                    {"add_generation_prompt", true}},
             limits);
  } catch (const shoal::jinja::TemplateError&) {
  }
  return 0;
}
