#include "server/tool_calls.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "server/json_brackets.h"
#include "server/openai_types.h"

namespace shoal::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kMarkers[] = {"<tool_call>", "<|python_tag|>", "[TOOL_CALLS]",
                                         "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                                         "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "to=functions.",
                                         "<minimax:tool_call>", "<|tool_call>"};

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Where the JSON object or array that opens at s[start] ends (one past its
// closing bracket), or npos when it does not close.
size_t json_extent(std::string_view s, size_t start) {
  size_t end = std::string_view::npos;
  walk_json_brackets(s, start, [&](size_t i, int depth) {
    if (depth == 0) end = i + 1;
    return depth != 0;
  });
  return end;
}

// {"name": …, "arguments" or "parameters": {…} or "…"} → a call.
bool to_call(const ojson& j, ToolCall& call) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  call.id = random_id("call_");
  call.name = name->get<std::string>();
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    auto parsed = ojson::parse(args->get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) return false;
    call.arguments = parsed.dump();
  } else if (args->is_object()) {
    call.arguments = args->dump();
  } else {
    return false;
  }
  return true;
}

// One object or a list of them.
bool to_calls(const ojson& j, std::vector<ToolCall>& calls) {
  if (j.is_array()) {
    if (j.empty()) return false;
    for (const auto& item : j) {
      ToolCall c;
      if (!to_call(item, c)) return false;
      calls.push_back(std::move(c));
    }
    return true;
  }
  ToolCall c;
  if (!to_call(j, c)) return false;
  calls.push_back(std::move(c));
  return true;
}

// The JSON value at the start of `s` (after spaces and a ```json fence).
ojson leading_json(std::string_view s, size_t& used) {
  size_t p = 0;
  while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
  if (s.substr(p, 3) == "```") {
    size_t nl = s.find('\n', p);
    if (nl == std::string_view::npos) return ojson(ojson::value_t::discarded);
    p = nl + 1;
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
  }
  if (p >= s.size() || (s[p] != '{' && s[p] != '[')) return ojson(ojson::value_t::discarded);
  size_t end = json_extent(s, p);
  if (end == std::string_view::npos) return ojson(ojson::value_t::discarded);
  used = end;
  size_t fence = s.find("```", end);
  if (fence != std::string_view::npos && trim(s.substr(end, fence - end)).empty()) used = fence + 3;
  return ojson::parse(s.substr(p, end - p), nullptr, false);
}

bool offered(const std::vector<ToolCall>& calls, const std::vector<std::string>& tools) {
  return std::all_of(calls.begin(), calls.end(), [&](const ToolCall& c) {
    return std::find(tools.begin(), tools.end(), c.name) != tools.end();
  });
}

// Arguments written as JSON (maybe in a ```json fence) at the start of `s`.
bool json_arguments(std::string_view s, ToolCall& call) {
  size_t used = 0;
  ojson j = leading_json(s, used);
  if (j.is_discarded() || !j.is_object()) return false;
  call.arguments = j.dump();
  return true;
}

// An argument written as text (GLM's, MiniMax's): what reads as JSON (a
// number, an object) is that, else the text as a string.
ojson text_argument(std::string_view text) {
  ojson parsed = ojson::parse(text, nullptr, false);
  return parsed.is_discarded() ? ojson(std::string(text)) : parsed;
}

// GLM 4.5+: <tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>…</tool_call>.
bool glm_call(std::string_view body, ToolCall& call) {
  const size_t first = body.find("<arg_key>");
  call.name = trim(body.substr(0, std::min(first, body.find('\n'))));
  if (call.name.empty() || call.name.find_first_of("{}[]<> ") != std::string::npos) return false;
  ojson args = ojson::object();
  for (size_t at = first; at != std::string_view::npos; at = body.find("<arg_key>", at)) {
    const size_t key_end = body.find("</arg_key>", at);
    const size_t value = body.find("<arg_value>", key_end);
    const size_t value_end = body.find("</arg_value>", value);
    if (key_end == std::string_view::npos || value == std::string_view::npos || value_end == std::string_view::npos)
      return false;
    const std::string key = trim(body.substr(at + 9, key_end - at - 9));
    args[key] = text_argument(body.substr(value + 11, value_end - value - 11));
    at = value_end;
  }
  call.id = random_id("call_");
  call.arguments = args.dump();
  return true;
}

// The text around a section of calls is the content.
void set_content(std::string_view s, size_t begin, size_t end, ToolReply& reply) {
  reply.content = trim(std::string(s.substr(0, begin)) + std::string(end < s.size() ? s.substr(end) : ""));
}

// A family that writes its calls in a section of markers:
//   SECTION_BEGIN (CALL_BEGIN head SEP arguments CALL_END)+ SECTION_END
// `name_of` reads the call's name from its head (and may move the start of
// the arguments past a name written after SEP); false: not a call.
struct SectionMarkers {
  std::string_view section_begin, call_begin, sep, call_end, section_end;
};
using NameOf = bool (*)(std::string_view head, std::string_view& arguments, std::string& name);

bool section_calls(std::string_view s, const SectionMarkers& m, NameOf name_of, ToolReply& reply) {
  size_t at = s.find(m.call_begin);
  if (at == std::string_view::npos) return false;
  const size_t section = s.rfind(m.section_begin, at);
  const size_t start = section == std::string_view::npos ? at : section;
  std::vector<ToolCall> calls;
  size_t stop = at;
  while (at != std::string_view::npos) {
    const size_t sep = s.find(m.sep, at);
    if (sep == std::string_view::npos) return false;
    const size_t end = s.find(m.call_end, sep);
    const std::string_view head = s.substr(at + m.call_begin.size(), sep - at - m.call_begin.size());
    std::string_view arguments =
        s.substr(sep + m.sep.size(), end == std::string_view::npos ? end : end - sep - m.sep.size());
    ToolCall c;
    c.id = random_id("call_");
    if (!name_of(head, arguments, c.name) || c.name.empty() || !json_arguments(arguments, c)) return false;
    calls.push_back(std::move(c));
    stop = end == std::string_view::npos ? s.size() : end + m.call_end.size();
    at = end == std::string_view::npos ? end : s.find(m.call_begin, end);
  }
  if (const size_t close = s.find(m.section_end, stop); close != std::string_view::npos)
    stop = close + m.section_end.size();
  reply.calls = std::move(calls);
  set_content(s, start, stop, reply);
  return true;
}

// DeepSeek: the head is the call's type "function" with the name on the
// line after <｜tool▁sep｜> and ```json arguments``` (V3, R1), or the name
// itself with the arguments straight after (V3.1 and later).
bool deepseek_calls(std::string_view s, ToolReply& reply) {
  static constexpr SectionMarkers kMarkers = {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                                               "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
  return section_calls(s, kMarkers, [](std::string_view head, std::string_view& arguments, std::string& name) {
    if (trim(head) != "function") {
      name = trim(head);
      return true;
    }
    const size_t nl = arguments.find('\n');
    name = trim(arguments.substr(0, nl));
    arguments = nl == std::string_view::npos ? std::string_view() : arguments.substr(nl + 1);
    return true;
  }, reply);
}

// Kimi K2: the head is functions.NAME:INDEX.
bool kimi_calls(std::string_view s, ToolReply& reply) {
  static constexpr SectionMarkers kMarkers = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                                               "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                                               "<|tool_calls_section_end|>"};
  return section_calls(s, kMarkers, [](std::string_view head, std::string_view&, std::string& name) {
    name = trim(head);
    if (name.starts_with("functions.")) name.erase(0, 10);
    if (const size_t colon = name.rfind(':'); colon != std::string::npos) name.erase(colon);
    return true;
  }, reply);
}

// The quoted value of the `name` attribute of a tag that opens at s[at]
// ("<invoke name=\"x\">"); `after` is one past the tag's '>'. Empty: none.
std::string name_attribute(std::string_view s, size_t at, size_t& after) {
  const size_t tag_end = s.find('>', at);
  const size_t eq = s.find("name=", at);
  if (tag_end == std::string_view::npos || eq == std::string_view::npos || eq > tag_end || eq + 5 >= tag_end)
    return {};
  const char quote = s[eq + 5];
  const size_t close = quote == '"' || quote == '\'' ? s.find(quote, eq + 6) : std::string_view::npos;
  if (close == std::string_view::npos || close > tag_end) return {};
  after = tag_end + 1;
  return std::string(s.substr(eq + 6, close - eq - 6));
}

// MiniMax M2: <minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter>…</invoke>…
// </minimax:tool_call>; a value as GLM's, less the newlines around it.
bool minimax_calls(std::string_view s, ToolReply& reply) {
  constexpr std::string_view kBegin = "<minimax:tool_call>", kEnd = "</minimax:tool_call>";
  const size_t start = s.find(kBegin);
  if (start == std::string_view::npos) return false;
  const size_t close = s.find(kEnd, start);
  const size_t stop = close == std::string_view::npos ? s.size() : close + kEnd.size();
  const std::string_view section = s.substr(start, (close == std::string_view::npos ? s.size() : close) - start);
  std::vector<ToolCall> calls;
  for (size_t at = section.find("<invoke "); at != std::string_view::npos; at = section.find("<invoke ", at)) {
    size_t body = 0;
    ToolCall c;
    c.id = random_id("call_");
    c.name = name_attribute(section, at, body);
    const size_t end = section.find("</invoke>", body);
    if (c.name.empty() || end == std::string_view::npos) return false;
    ojson args = ojson::object();
    for (size_t p = section.find("<parameter ", body); p < end; p = section.find("<parameter ", p)) {
      size_t value = 0;
      const std::string key = name_attribute(section, p, value);
      const size_t value_end = section.find("</parameter>", value);
      if (key.empty() || value_end == std::string_view::npos || value_end > end) return false;
      std::string_view text = section.substr(value, value_end - value);
      if (text.starts_with('\n')) text.remove_prefix(1);
      if (text.ends_with('\n')) text.remove_suffix(1);
      args[key] = text_argument(text);
      p = value_end;
    }
    c.arguments = args.dump();
    calls.push_back(std::move(c));
    at = end;
  }
  if (calls.empty()) return false;
  reply.calls = std::move(calls);
  set_content(s, start, stop, reply);
  return true;
}

// Gemma 4's argument notation: strings between <|"|> markers, keys bare,
// numbers, true, false and null as written, {…} and […] as in JSON. Reads
// one value from s[at] on; nullopt where it is not one.
std::optional<ojson> gemma4_value(std::string_view s, size_t& at) {
  constexpr std::string_view kQuote = "<|\"|>";
  auto skip = [&] {
    while (at < s.size() && std::isspace(static_cast<unsigned char>(s[at]))) ++at;
  };
  skip();
  if (at >= s.size()) return std::nullopt;
  if (s.substr(at).starts_with(kQuote)) {
    const size_t end = s.find(kQuote, at + kQuote.size());
    if (end == std::string_view::npos) return std::nullopt;
    ojson text = std::string(s.substr(at + kQuote.size(), end - at - kQuote.size()));
    at = end + kQuote.size();
    return text;
  }
  if (s[at] == '{' || s[at] == '[') {
    const bool object = s[at] == '{';
    const char close = object ? '}' : ']';
    ojson out = object ? ojson::object() : ojson::array();
    ++at;
    skip();
    if (at < s.size() && s[at] == close) return ++at, out;
    for (;;) {
      if (object) {
        std::string key;
        if (s.substr(at).starts_with(kQuote)) {
          const auto quoted = gemma4_value(s, at);
          if (!quoted || !quoted->is_string()) return std::nullopt;
          key = quoted->get<std::string>();
        } else {
          const size_t colon = s.find(':', at);
          if (colon == std::string_view::npos) return std::nullopt;
          key = trim(s.substr(at, colon - at));
          at = colon;
        }
        skip();
        if (key.empty() || at >= s.size() || s[at] != ':') return std::nullopt;
        ++at;
        const auto value = gemma4_value(s, at);
        if (!value) return std::nullopt;
        out[key] = *value;
      } else {
        const auto value = gemma4_value(s, at);
        if (!value) return std::nullopt;
        out.push_back(*value);
      }
      skip();
      if (at < s.size() && s[at] == ',') {
        ++at;
        skip();
        continue;
      }
      if (at < s.size() && s[at] == close) return ++at, out;
      return std::nullopt;
    }
  }
  // A bare scalar: up to the next separator.
  size_t end = at;
  while (end < s.size() && s[end] != ',' && s[end] != '}' && s[end] != ']') ++end;
  const std::string word = trim(s.substr(at, end - at));
  if (word.empty()) return std::nullopt;
  at = end;
  if (word == "None") return ojson(nullptr);  // how a Jinja null prints
  return text_argument(word);
}

// Gemma 4: <|tool_call>call:NAME{ARGS}<tool_call|>, one after another, the
// arguments in its own notation (gemma4_value).
bool gemma4_calls(std::string_view s, ToolReply& reply) {
  constexpr std::string_view kBegin = "<|tool_call>", kEnd = "<tool_call|>", kCall = "call:";
  const size_t first = s.find(kBegin);
  if (first == std::string_view::npos) return false;
  std::vector<ToolCall> calls;
  std::string content(s.substr(0, first));
  size_t at = first;
  while (at != std::string_view::npos && at < s.size()) {
    size_t p = at + kBegin.size();
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
    if (!s.substr(p).starts_with(kCall)) return false;
    p += kCall.size();
    const size_t open = s.find('{', p);
    if (open == std::string_view::npos) return false;
    ToolCall c;
    c.id = random_id("call_");
    c.name = trim(s.substr(p, open - p));
    size_t end = open;
    const auto args = gemma4_value(s, end);
    if (c.name.empty() || !args || !args->is_object()) return false;
    c.arguments = args->dump();
    calls.push_back(std::move(c));
    while (end < s.size() && std::isspace(static_cast<unsigned char>(s[end]))) ++end;
    if (s.substr(end).starts_with(kEnd)) end += kEnd.size();
    const size_t next = s.find(kBegin, end);
    content += s.substr(end, next == std::string_view::npos ? std::string_view::npos : next - end);
    at = next;
  }
  reply.calls = std::move(calls);
  reply.content = trim(content);
  return true;
}

// gpt-oss (harmony): … to=functions.NAME<|channel|>commentary json<|message|>ARGS
// (or the recipient after the channel); <|call|> ends generation. Text
// before the call's <|start|> (or its channel) is content.
bool gpt_oss_call(std::string_view s, ToolReply& reply) {
  constexpr std::string_view kTo = "to=functions.";
  const size_t to = s.find(kTo);
  if (to == std::string_view::npos) return false;
  size_t name_end = to + kTo.size();
  while (name_end < s.size() && !std::isspace(static_cast<unsigned char>(s[name_end])) && s[name_end] != '<') ++name_end;
  const size_t message = s.find("<|message|>", name_end);
  if (message == std::string_view::npos) return false;
  ToolCall c;
  c.id = random_id("call_");
  c.name = std::string(s.substr(to + kTo.size(), name_end - to - kTo.size()));
  if (c.name.empty() || !json_arguments(s.substr(message + 11), c)) return false;
  size_t start = s.rfind("<|start|>", to);
  if (start == std::string_view::npos) start = s.rfind("<|channel|>", to);
  if (start == std::string_view::npos) start = to;
  reply.calls.push_back(std::move(c));
  reply.content = trim(s.substr(0, start));
  return true;
}

}  // namespace

ToolReply parse_tool_calls(const std::string& text, const std::vector<std::string>& tools) {
  ToolReply reply;
  std::string_view s(text);
  // Hermes / Qwen: any number of <tool_call> blocks among the text.
  if (s.find("<tool_call>") != std::string_view::npos) {
    std::string content;
    size_t at = 0;
    while (true) {
      size_t open = s.find("<tool_call>", at);
      if (open == std::string_view::npos) break;
      size_t inner = open + std::string_view("<tool_call>").size();
      size_t close = s.find("</tool_call>", inner);
      std::string_view body = s.substr(inner, close == std::string_view::npos ? std::string_view::npos : close - inner);
      size_t used = 0;
      ojson j = leading_json(body, used);
      std::vector<ToolCall> calls;
      if (j.is_discarded() || !to_calls(j, calls)) {
        ToolCall glm;
        const bool named = glm_call(body, glm) &&
                           (tools.empty() || std::find(tools.begin(), tools.end(), glm.name) != tools.end());
        if (!named) break;  // not a call: the rest stays text
        calls.push_back(std::move(glm));
      }
      content += s.substr(at, open - at);
      for (auto& c : calls) reply.calls.push_back(std::move(c));
      at = close == std::string_view::npos ? s.size() : close + std::string_view("</tool_call>").size();
    }
    content += s.substr(at);
    reply.content = trim(content);
    return reply;
  }
  // Llama 3.x's python tag, Mistral's [TOOL_CALLS]: the calls follow the marker.
  for (std::string_view marker : {std::string_view("<|python_tag|>"), std::string_view("[TOOL_CALLS]")}) {
    size_t m = s.find(marker);
    if (m == std::string_view::npos) continue;
    std::string_view rest = s.substr(m + marker.size());
    size_t used = 0;
    ojson j = leading_json(rest, used);
    std::vector<ToolCall> calls;
    if (!j.is_discarded() && to_calls(j, calls)) {
      reply.content = trim(std::string(s.substr(0, m)) + std::string(rest.substr(used)));
      reply.calls = std::move(calls);
      return reply;
    }
    // Mistral's newer form: name[ARGS]{…}, repeated.
    size_t args = rest.find("[ARGS]");
    if (marker == "[TOOL_CALLS]" && args != std::string_view::npos) {
      while (args != std::string_view::npos) {
        ToolCall c;
        c.id = random_id("call_");
        c.name = trim(rest.substr(0, args));
        size_t open = rest.find('{', args);
        size_t end = open == std::string_view::npos ? open : json_extent(rest, open);
        if (end == std::string_view::npos) break;
        auto parsed = ojson::parse(rest.substr(open, end - open), nullptr, false);
        if (parsed.is_discarded() || !parsed.is_object()) break;
        c.arguments = parsed.dump();
        reply.calls.push_back(std::move(c));
        rest = rest.substr(end);
        size_t next = rest.find("[TOOL_CALLS]");
        if (next != std::string_view::npos) rest = rest.substr(next + marker.size());
        args = rest.find("[ARGS]");
      }
      if (!reply.calls.empty()) {
        reply.content = trim(s.substr(0, m));
        return reply;
      }
    }
  }
  for (auto* family : {&deepseek_calls, &kimi_calls, &minimax_calls, &gemma4_calls, &gpt_oss_call}) {
    if (family(s, reply)) return reply;
  }
  // A reply that is nothing but calls naming offered tools: one object, a
  // list of them, or objects one after another (one a line, say).
  std::vector<ToolCall> calls;
  std::string_view rest = s;
  while (!trim(rest).empty()) {
    size_t used = 0;
    ojson j = leading_json(rest, used);
    if (j.is_discarded() || !to_calls(j, calls)) {
      calls.clear();
      break;
    }
    rest = rest.substr(used);
  }
  if (!calls.empty() && offered(calls, tools)) {
    reply.calls = std::move(calls);
    return reply;
  }
  reply.content = text;
  return reply;
}

std::string ToolCallSplitter::feed(std::string_view piece) {
  held_ += piece;
  if (holding_) return {};
  if (!started_) {
    size_t p = 0;
    while (p < held_.size() && std::isspace(static_cast<unsigned char>(held_[p]))) ++p;
    if (p == held_.size()) return {};  // only spaces so far
    std::string_view first = std::string_view(held_).substr(p);
    if (first[0] == '{' || first[0] == '[' || first.starts_with("```")) {
      holding_ = true;
      return {};
    }
    if (std::string_view("```").starts_with(first)) return {};  // "`" or "``": wait
    started_ = true;
  }
  for (std::string_view marker : kMarkers) {
    size_t m = held_.find(marker);
    if (m != std::string::npos) {
      std::string out = held_.substr(0, m);
      held_.erase(0, m);
      holding_ = true;
      return out;
    }
  }
  // Keep back a tail that may be the start of a marker.
  size_t keep = 0;
  for (std::string_view marker : kMarkers)
    for (size_t n = std::min(marker.size() - 1, held_.size()); n > keep; --n)
      if (std::string_view(held_).substr(held_.size() - n) == marker.substr(0, n)) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

const std::vector<std::string>& tool_call_markers() {
  static const std::vector<std::string> markers = {
      "<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "<arg_key>", "</arg_key>",
      "<arg_value>", "</arg_value>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
      "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
      "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|start|>",
      "<|channel|>", "<|message|>", "<|constrain|>", "<minimax:tool_call>", "</minimax:tool_call>", "<|tool_call>",
      "<tool_call|>", "<|\"|>"};
  return markers;
}

ToolReply ToolCallSplitter::finish() {
  if (holding_) return parse_tool_calls(held_, tools_);
  ToolReply reply;
  reply.content = std::move(held_);
  held_.clear();
  return reply;
}

}  // namespace shoal::server
