#pragma once
// A conversation rendered through the model's own Jinja chat template, with
// the variables Hugging Face's apply_chat_template gives it: messages, tools
// (undefined when the request has none, as llama-server leaves it: not
// None), add_generation_prompt, bos_token, eos_token, and the request's
// chat_template_kwargs
// (enable_thinking, …). A tool call's "arguments" sent as a JSON string, as
// OpenAI clients send them, reaches the template as the object it encodes,
// as llama-server passes it (templates write it with tojson).
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/template.h"

namespace shoal {

struct ChatRenderRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;   // null or an array of OpenAI tool objects
  bool add_generation_prompt = true;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // extra template variables
};

class JinjaChat {
 public:
  // Throws shoal::Error (a TemplateError naming the line) for a template
  // that does not parse.
  JinjaChat(const std::string& source, std::string bos_token, std::string eos_token);

  // The prompt exactly as the template writes it. Throws TemplateError when
  // the template fails or runs over its limits.
  std::string render(const ChatRenderRequest& request) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::Template template_;
  std::string bos_token_, eos_token_;
};

}  // namespace shoal
