#include "tokenizer/chat_template.h"

#include <string_view>

#include "util/error.h"

namespace shoal {
namespace {

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}


struct Variant {
  const char* name;
  ChatFormat format;
  FormatFlags flags;
};

// llama.cpp's template names, so that a name given instead of a template
// means what it means there.
const Variant kVariants[] = {
    {"chatml", ChatFormat::ChatML, {}},
    {"phi4", ChatFormat::Phi4, {}},
    {"llama3", ChatFormat::Llama3, {}},
    {"llama2", ChatFormat::Llama2, {}},
    {"llama2-sys", ChatFormat::Llama2, {.system_block = true}},
    {"llama2-sys-bos", ChatFormat::Llama2, {.system_block = true, .bos_in_history = true}},
    {"llama2-sys-strip", ChatFormat::Llama2, {.system_block = true, .strip = true}},
    {"mistral-v1", ChatFormat::Mistral, {.leading_space = true}},
    {"mistral-v3", ChatFormat::Mistral, {.trim_reply = true}},
    {"mistral-v3-tekken", ChatFormat::Mistral, {.inner_space = false}},
    {"mistral-v7", ChatFormat::MistralV7, {}},
    {"mistral-v7-tekken", ChatFormat::MistralV7, {.inner_space = false}},
    {"gemma", ChatFormat::Gemma, {}},
    {"phi3", ChatFormat::Phi3, {.turn_end = "<|end|>"}},
    {"zephyr", ChatFormat::Zephyr, {}},
    {"gpt-oss", ChatFormat::Harmony, {}},
};

// Reads the Jinja string literal whose opening quote is at s[i]; on success
// `i` is just past the closing quote. Escapes follow Python's.
bool read_literal(const std::string& s, size_t& i, std::string& out) {
  const char quote = s[i];
  out.clear();
  for (size_t j = i + 1; j < s.size(); ++j) {
    char c = s[j];
    if (c == quote) {
      i = j + 1;
      return true;
    }
    if (c == '\\' && j + 1 < s.size()) {
      char e = s[++j];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': case '\'': case '"': out += e; break;
        default: out += '\\'; out += e; break;
      }
      continue;
    }
    out += c;
  }
  return false;
}

// The text of every `{{ 'text' }}` (whitespace control allowed) whose whole
// expression is one string literal: text the template writes as it stands.
std::vector<std::string> output_literals(const std::string& src) {
  std::vector<std::string> found;
  std::string text;
  for (size_t at = src.find("{{"); at != std::string::npos; at = src.find("{{", at + 2)) {
    size_t i = at + 2;
    if (i < src.size() && (src[i] == '-' || src[i] == '+')) ++i;
    while (i < src.size() && is_space(src[i])) ++i;
    if (i >= src.size() || (src[i] != '\'' && src[i] != '"')) continue;
    if (!read_literal(src, i, text)) continue;
    while (i < src.size() && is_space(src[i])) ++i;
    if (i < src.size() && src[i] == '-') ++i;
    if (src.compare(i, 2, "}}") == 0) found.push_back(text);
  }
  return found;
}

}  // namespace

namespace {
// Role-and-text messages as a template's `messages`.
ChatRenderRequest conversation(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  ChatRenderRequest request;
  for (const ChatMessage& m : messages) request.messages.push_back({{"role", m.role}, {"content", m.content}});
  request.add_generation_prompt = add_generation_prompt;
  return request;
}
}  // namespace

bool ChatTemplate::set_variant(const std::string& name) {
  for (const Variant& v : kVariants) {
    if (name != v.name) continue;
    format_ = v.format;
    name_ = v.name;
    flags_ = v.flags;
    return true;
  }
  return false;
}

// The order of the checks is llama.cpp's: markers shared by several families
// ("[INST]", "<|assistant|>") are told apart by the finer checks inside.
ChatTemplate ChatTemplate::detect(const std::string& src) {
  ChatTemplate t;
  if (t.set_variant(src)) return t;  // a name, not a template
  auto has = [&src](std::string_view part) { return contains(src, part); };
  if (has("<|start|>") && has("<|channel|>") && has("<|message|>")) {
    t.set_variant("gpt-oss");  // OpenAI's harmony format
  } else if (has("<|im_start|>")) {
    t.set_variant(has("<|im_sep|>") ? "phi4" : "chatml");
  } else if (has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) {
      t.set_variant(has("[SYSTEM_PROMPT] ") ? "mistral-v7" : "mistral-v7-tekken");
    } else if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      // Mistral's official v1, v3 and v3-tekken templates.
      t.set_variant(has(" [INST]")         ? "mistral-v1"
                    : has("\"[INST]\"")    ? "mistral-v3-tekken"
                                           : "mistral-v3");
      // v3 puts the system text in front of the last user message.
      t.flags_.system_last = has("loop.last and system_message");
    } else {
      // Llama 2, and the Mistral v0.1/v0.2 templates shaped like it.
      const bool strip = has("content.strip()");
      const bool bos = has("bos_token + '[INST]");
      t.set_variant(strip ? "llama2-sys-strip"
                    : bos ? "llama2-sys-bos"
                    : has("<<SYS>>") ? "llama2-sys"
                                     : "llama2");
      // Real Llama 2 templates strip *and* repeat BOS; HF keeps both.
      t.flags_.strip = strip;
      t.flags_.bos_in_history = bos;
      t.flags_.spaced_reply = has("+ ' ' + eos_token");
    }
  } else if (has("<|assistant|>") && has("<|end|>")) {
    t.set_variant("phi3");
  } else if (has("<|user|>") && has("<|assistant|>") &&
             (has("eos_token") || has("</s>") || has("<|endoftext|>"))) {
    // Zephyr (TinyLlama-Chat, StableLM Zephyr) ends turns with eos_token,
    // "</s>" unless the template spells out another.
    t.set_variant("zephyr");
    if (has("<|endoftext|>")) t.flags_.turn_end = "<|endoftext|>";
  } else if (has("<start_of_turn>")) {
    t.set_variant("gemma");
  } else if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
    t.set_variant("llama3");
  } else {
    t.fell_back_ = true;  // already ChatML
    t.unknown_ = !src.empty();
  }
  // Gemma 4 thinks in a channel: <|channel>thought\n…<channel|> before the answer.
  t.channel_thoughts_ = has("<|channel>") && has("<channel|>");
  t.thinks_ = (has("<think>") && has("</think>")) || t.format_ == ChatFormat::Harmony || t.channel_thoughts_;
  t.default_system_ = t.find_default_system(src);
  return t;
}

void ChatTemplate::use_jinja(std::shared_ptr<const JinjaChat> jinja, bool strip_bos) {
  jinja_ = std::move(jinja);
  strip_bos_ = strip_bos;
}

std::string ChatTemplate::render_prompt(const ChatRenderRequest& request) const {
  std::string out = render_request(request);
  if (jinja_) {
    const std::string& bos = jinja_->bos_token();
    if (strip_bos_ && !bos.empty() && out.starts_with(bos)) out.erase(0, bos.size());
  }
  return out;
}

std::string ChatTemplate::render_request(const ChatRenderRequest& request) const {
  if (jinja_) return jinja_->render(request);
  if (request.tools.is_array())
    fail("tools need the model's own Jinja template; the built-in '{}' format has no place for them", name_);
  std::vector<ChatMessage> messages;
  for (const auto& m : request.messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      fail("each message needs a string 'role'");
    auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_null())
      fail("the built-in '{}' format takes text content only", name_);
    messages.push_back({m["role"].get<std::string>(),
                        content != m.end() && content->is_string() ? content->get<std::string>() : ""});
  }
  auto thinking = request.kwargs.find("enable_thinking");
  return render(messages, request.add_generation_prompt,
                thinking == request.kwargs.end() || !thinking->is_boolean() || thinking->get<bool>());
}

void ChatTemplate::require_known() const {
  if (unknown_ && !jinja_)
    fail("the model's chat template is not one Shoal recognises; name its format with --chat-template "
         "(one of: {}), or use plain completions", known_names());
}

std::string ChatTemplate::known_names() {
  std::string out;
  for (const Variant& v : kVariants) out += (out.empty() ? "" : ", ") + std::string(v.name);
  return out;
}

// A default system message is written by the template as one literal that is
// a whole system turn of its own format (SmolLM2: `{% if loop.first and
// messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n…<|im_end|>\n' }}`,
// Qwen2.5 in an {% else %}). Render a system turn around a placeholder and
// look for a literal of that shape.
std::string ChatTemplate::find_default_system(const std::string& src) const {
  const std::string placeholder = "\x01";
  const std::string shape = render_turns({{"system", placeholder}}, false);
  const size_t at = shape.find(placeholder);
  if (at == std::string::npos) return {};  // the format folds system text away
  const std::string prefix = shape.substr(0, at);
  const std::string suffix = shape.substr(at + placeholder.size());
  for (const std::string& text : output_literals(src)) {
    if (text.size() > prefix.size() + suffix.size() && text.starts_with(prefix) &&
        text.ends_with(suffix)) {
      return text.substr(prefix.size(), text.size() - prefix.size() - suffix.size());
    }
  }
  return {};
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, bool reasoning) const {
  if (jinja_) {
    ChatRenderRequest request = conversation(messages, add_generation_prompt);
    request.kwargs["enable_thinking"] = reasoning;
    return render_prompt(request);
  }
  require_known();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      fail("chat message {} has role '{}': expected system, user or assistant", i, role);
    }
  }
  std::vector<ChatMessage> turns;
  turns.reserve(messages.size() + 1);
  if (!default_system_.empty() && !messages.empty() && messages[0].role != "system")
    turns.push_back({"system", default_system_});
  for (const ChatMessage& m : messages) {
    turns.push_back(m);
    // The history keeps answers, not the thinking that led to them.
    if (thinks_ && m.role == "assistant") {
      std::string& c = turns.back().content;
      // As Qwen3's template: the text after the last </think>, leading newlines dropped.
      const size_t end = c.rfind("</think>");
      if (end != std::string::npos) c = c.substr(std::min(c.size(), c.find_first_not_of('\n', end + 8)));
    }
  }
  std::string out = render_turns(turns, add_generation_prompt);
  // gpt-oss always reasons (its effort stays the template's default).
  if (thinks_ && format_ != ChatFormat::Harmony && add_generation_prompt && !reasoning) out += "<think>\n\n</think>\n\n";
  return out;
}

std::string ChatTemplate::render_turns(const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt) const {
  ChatRenderRequest request = conversation(messages, add_generation_prompt);
  request.kwargs = format_variables(flags_);
  return builtin_format(format_).render(request);
}

ReasoningMarkers ChatTemplate::reasoning_markers() const {
  if (format_ == ChatFormat::Harmony) return {"<|channel|>analysis<|message|>", "<|end|>", "<|channel|>final<|message|>"};
  if (channel_thoughts_) return {"<|channel>thought", "<channel|>"};
  return {};
}

// The first "[INST] " is open from the start (its BOS is the tokenizer's);
// each reply closes a turn. The generation prompt is the closing [/INST].
std::vector<std::string> ChatTemplate::stop_strings() const {
  switch (format_) {
    case ChatFormat::ChatML:
    case ChatFormat::Phi4: return {"<|im_end|>"};
    case ChatFormat::Llama3: return {"<|eot_id|>"};
    case ChatFormat::Gemma: return {"<end_of_turn>"};
    case ChatFormat::Phi3: return {"<|end|>"};
    case ChatFormat::Zephyr: return {flags_.turn_end};
    case ChatFormat::Llama2:
    case ChatFormat::Mistral:
    case ChatFormat::MistralV7: return {"</s>"};
    // <|end|> closes a message (the reasoning), not the turn.
    case ChatFormat::Harmony: return {"<|return|>", "<|call|>"};
    case ChatFormat::Count: break;
  }
  return {};
}

}  // namespace shoal
