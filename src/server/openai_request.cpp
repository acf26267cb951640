// Request bodies of /v1/chat/completions and /v1/completions → GenerationRequest.
// Every field is checked for type and range, and a bad one gives a 400 that
// names it (OpenAI's wording where it has one), so a client learns what to
// fix instead of getting a silently different generation.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "server/json_brackets.h"
#include "server/openai_types.h"
#include "server/request_errors.h"

namespace shoal::server {
namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a decimal";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unknown type";
  }
}

[[noreturn]] void bad_type(const std::string& key, const char* expected, const json& got) {
  throw ApiError(400, fmt::format("Invalid type for '{}': expected {}, but got {} instead.", key, expected,
                                  type_name(got)),
                 "invalid_request_error", key, "invalid_type");
}

void read_number(const json& body, const char* key, double lo, double hi, float& out) {
  const json* v = field(body, key);
  if (!v) return;
  if (!v->is_number()) bad_type(key, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad_value(key, fmt::format("expected a value in [{}, {}], but got {} instead.", lo, hi, x));
  out = static_cast<float>(x);
}

// Integers may arrive as 5.0 from some JSON encoders; a fraction is refused.
bool read_integer(const json& body, const char* key, int64_t lo, int64_t hi, int64_t& out) {
  const json* v = field(body, key);
  if (!v) return false;
  if (!v->is_number()) bad_type(key, "an integer", *v);
  const double x = v->get<double>();
  if (v->is_number_float() && x != std::floor(x)) bad_type(key, "an integer", *v);
  // Range-check before converting: 1e30 or 2^64-1 must not wrap into range.
  // (nlohmann parses every non-negative integer as unsigned.)
  const bool in_range = v->is_number_unsigned() ? v->get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                                      (lo <= 0 || v->get<uint64_t>() >= static_cast<uint64_t>(lo))
                        : v->is_number_float()  ? x >= static_cast<double>(lo) && x <= static_cast<double>(hi)
                                                : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
  if (!in_range) bad_value(key, fmt::format("expected a value in [{}, {}], but got {} instead.", lo, hi, v->dump()));
  out = v->is_number_float() ? static_cast<int64_t>(x) : v->get<int64_t>();
  return true;
}

bool read_bool(const json& body, const char* key, bool& out) {
  const json* v = field(body, key);
  if (!v) return false;
  if (!v->is_boolean()) bad_type(key, "a boolean", *v);
  out = v->get<bool>();
  return true;
}

// One constraint per request: a second is a 400 naming both.
void claim_constraint(GenerationRequest& r, const std::string& param) {
  if (!r.constrained_by.empty())
    bad_value(param, fmt::format("only one of 'response_format' (json), 'grammar' and 'json_schema' may be given, "
                                 "but '{}' is too.", r.constrained_by));
  r.constrained_by = param;
}

// Read from the body as sent (ordered_json): a schema's properties are
// written in the order the client listed them.
void read_constraint(const nlohmann::ordered_json& body, GenerationRequest& r) {
  using ojson = nlohmann::ordered_json;
  const auto get = [](const ojson& object, const char* key) -> const ojson* {
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  };
  const auto plain = [](const ojson& v) { return json::parse(v.dump()); };
  if (const ojson* v = get(body, "response_format")) {
    if (!v->is_object()) bad_type("response_format", "an object", plain(*v));
    const ojson* type = get(*v, "type");
    if (!type) missing_parameter("response_format.type");
    if (*type == "json_object") {
      claim_constraint(r, "response_format");
      r.response_schema = ojson{{"type", "object"}};
    } else if (*type == "json_schema") {
      const ojson* spec = get(*v, "json_schema");
      if (!spec) missing_parameter("response_format.json_schema");
      if (!spec->is_object()) bad_type("response_format.json_schema", "an object", plain(*spec));
      if (const ojson* strict = get(*spec, "strict"); strict && !strict->is_boolean())
        bad_type("response_format.json_schema.strict", "a boolean", plain(*strict));
      // Without a schema any JSON value goes (llama-server does the same).
      const ojson* schema = get(*spec, "schema");
      claim_constraint(r, "response_format");
      r.response_schema = schema ? *schema : ojson(true);
    } else if (*type != "text") {
      bad_value("response_format.type",
                fmt::format("expected 'text', 'json_object' or 'json_schema', but got {}.", type->dump()));
    }
  }
  if (const ojson* v = get(body, "json_schema")) {  // llama-server's shortcut
    if (!v->is_object() && !v->is_boolean()) bad_type("json_schema", "an object", plain(*v));
    claim_constraint(r, "json_schema");
    r.response_schema = *v;
  }
  if (const ojson* v = get(body, "grammar")) {
    if (!v->is_string()) bad_type("grammar", "a string", plain(*v));
    if (!v->get<std::string>().empty()) {
      claim_constraint(r, "grammar");
      r.gbnf = v->get<std::string>();
    }
  }
}

// logit_bias as OpenAI sends it ({"token id": bias}, bias in [-100, 100])
// and as llama-server also takes it (keys that are texts; [[id or text,
// bias], …]; false for a bias bans the token). Resolved against the
// vocabulary by the route.
void read_logit_bias(const json& body, GenerationRequest& r) {
  const json* v = field(body, "logit_bias");
  if (!v) return;
  constexpr size_t kMaxEntries = 1024;
  if (!v->is_object() && !v->is_array()) bad_type("logit_bias", "an object", *v);
  if (v->size() > kMaxEntries)
    bad_value("logit_bias", fmt::format("at most {} entries, but got {}.", kMaxEntries, v->size()));
  auto bias_of = [](const json& b, const std::string& key) {
    if (b.is_boolean() && !b.get<bool>()) return -std::numeric_limits<float>::infinity();
    if (!b.is_number()) bad_type(key, "a number (or false, to ban the token)", b);
    const double x = b.get<double>();
    if (!std::isfinite(x) || x < -100 || x > 100)
      bad_value(key, fmt::format("expected a value in [-100, 100], but got {} instead.", b.dump()));
    return static_cast<float>(x);
  };
  auto add = [&](const json& key, const json& bias, const std::string& name) {
    GenerationRequest::Bias entry;
    entry.bias = bias_of(bias, name);
    if (key.is_number_integer() || key.is_number_unsigned()) {
      entry.token = key.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(key.get<uint64_t>(), INT64_MAX))
                                             : key.get<int64_t>();
      if (entry.token < 0) bad_value(name, fmt::format("token ids are not negative, but got {}.", entry.token));
    } else if (key.is_string()) {
      const std::string& k = key.get_ref<const std::string&>();
      int64_t id = 0;
      const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
      if (ec == std::errc() && end == k.data() + k.size() && id >= 0) entry.token = id;
      else if (k.empty()) bad_value(name, "an empty text names no token.");
      else entry.text = k;
    } else {
      bad_type(name, "a token id or a text", key);
    }
    r.logit_bias.push_back(std::move(entry));
  };
  if (v->is_object()) {
    for (const auto& [key, bias] : v->items()) add(json(key), bias, fmt::format("logit_bias.{}", key));
  } else {
    for (size_t i = 0; i < v->size(); ++i) {
      const json& pair = (*v)[i];
      const std::string name = fmt::format("logit_bias[{}]", i);
      if (!pair.is_array() || pair.size() != 2) bad_type(name, "a [token, bias] pair", pair);
      add(pair[0], pair[1], name);
    }
  }
}

// Fields this server parses for both endpoints.
void read_common(const json& body, const RequestDefaults& defaults, GenerationRequest& r) {
  if (const json* v = field(body, "model")) {
    if (!v->is_string()) bad_type("model", "a string", *v);
    r.model = v->get<std::string>();
  }
  read_bool(body, "stream", r.stream);
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) bad_type("stream_options", "an object", *v);
    if (const json* u = field(*v, "include_usage")) {
      if (!u->is_boolean()) bad_type("stream_options.include_usage", "a boolean", *u);
      r.include_usage = u->get<bool>();
    }
  }

  GenerationOptions& o = r.options;
  o.max_tokens = defaults.max_tokens;
  o.sampling = defaults.sampling;
  int64_t i = 0;
  // max_completion_tokens replaces max_tokens in OpenAI's current API; both work.
  if (read_integer(body, "max_tokens", 1, std::numeric_limits<int32_t>::max(), i)) o.max_tokens = static_cast<int>(i);
  if (read_integer(body, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max(), i))
    o.max_tokens = static_cast<int>(i);
  // llama-server's name for it; -1 there means "until the end".
  if (read_integer(body, "n_predict", -1, std::numeric_limits<int32_t>::max(), i))
    o.max_tokens = i == 0 ? defaults.max_tokens : static_cast<int>(i);
  if (read_integer(body, "n", 1, std::numeric_limits<int32_t>::max(), i) && i != 1)
    bad_value("n", fmt::format("only n = 1 is supported, but got {} instead.", i));

  SamplingParams& s = o.sampling;
  read_number(body, "temperature", 0.0, 2.0, s.temperature);
  read_number(body, "top_p", 0.0, 1.0, s.top_p);
  read_number(body, "min_p", 0.0, 1.0, s.min_p);
  read_number(body, "presence_penalty", -2.0, 2.0, s.presence_penalty);
  read_number(body, "frequency_penalty", -2.0, 2.0, s.frequency_penalty);
  // llama.cpp's extensions, which the openai client passes through extra_body.
  read_number(body, "repeat_penalty", 0.01, 100.0, s.repeat_penalty);
  if (read_integer(body, "top_k", 0, std::numeric_limits<int32_t>::max(), i)) s.top_k = static_cast<int>(i);
  if (read_integer(body, "repeat_last_n", -1, std::numeric_limits<int32_t>::max(), i))
    s.repeat_last_n = static_cast<int>(i);
  read_bool(body, "ignore_eos", o.ignore_eos);
  if (const json* v = field(body, "seed")) {
    if (!v->is_number_integer() && !v->is_number_unsigned()) bad_type("seed", "an integer", *v);
    // A negative seed asks for a random one, as llama.cpp's -1 does.
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>()
             : v->get<int64_t>() < 0 ? Sampler::kRandomSeed
                                     : static_cast<uint64_t>(v->get<int64_t>());
  }

  // Speculative decoding per request, as llama-server's flat keys
  // (speculative.n_max, .n_min, .p_min) or one object: at most n_max guessed
  // tokens a step (0: none for this request), fewer than n_min none, a draft
  // model stopping below p_min.
  const json* nested = field(body, "speculative");
  if (nested && !nested->is_object()) bad_type("speculative", "an object", *nested);
  if (nested)
    for (const auto& [key, value] : nested->items())
      if (key != "n_max" && key != "n_min" && key != "p_min")
        bad_value("speculative." + key, "expected one of n_max, n_min and p_min.");
  for (const json* where : {&body, nested}) {
    if (!where) continue;
    const bool flat = where == &body;
    if (read_integer(*where, flat ? "speculative.n_max" : "n_max", 0, 64, i)) o.draft_max = static_cast<int>(i);
    if (read_integer(*where, flat ? "speculative.n_min" : "n_min", 0, 64, i)) o.draft_min = static_cast<int>(i);
    read_number(*where, flat ? "speculative.p_min" : "p_min", 0.0, 1.0, o.draft_p_min);
  }

  if (const json* v = field(body, "stop")) {
    constexpr size_t kMaxStops = 16;
    auto add = [&](const json& s) {
      if (!s.is_string()) bad_type("stop", "a string or an array of strings", s);
      // An empty stop string would match at once; clients send "" to mean none.
      if (!s.get<std::string>().empty()) o.stop.push_back(s.get<std::string>());
    };
    if (v->is_array()) {
      if (v->size() > kMaxStops)
        bad_value("stop", fmt::format("at most {} stop strings, but got {}.", kMaxStops, v->size()));
      for (const json& s : *v) add(s);
    } else {
      add(*v);
    }
  }

  if (const json* v = field(body, "functions"); v && !(v->is_array() && v->empty()))
    unsupported("functions", "the deprecated 'functions'; send 'tools'");
  if (field(body, "function_call")) unsupported("function_call", "the deprecated 'function_call'; send 'tool_choice'");
  read_logit_bias(body, r);
}

// What llama-server's code-completion clients (llama.vscode, llama.vim) send
// with /infill and /completion: n_indent and t_max_predict_ms (honoured, as
// GenerationOptions::min_indent and max_predict_ms), response_fields (the
// answer cut to those fields); t_max_prompt_ms, which llama-server does not
// honour either, and samplers, the order of llama.cpp's sampler chain, are
// checked and accepted: the chain here has one fixed order (penalties,
// top-k, top-p, min-p, temperature), and llama.cpp's "infill" sampler is not
// run (docs/server-api.md).
void read_code_completion_limits(const json& body, GenerationRequest& r) {
  int64_t i = 0;
  if (read_integer(body, "n_indent", 0, std::numeric_limits<int32_t>::max(), i)) r.options.min_indent = static_cast<int>(i);
  if (read_integer(body, "t_max_predict_ms", -1, std::numeric_limits<int32_t>::max(), i) && i > 0)
    r.options.max_predict_ms = static_cast<double>(i);
  read_integer(body, "t_max_prompt_ms", -1, std::numeric_limits<int32_t>::max(), i);
  static const std::set<std::string, std::less<>> kSamplers = {
      "dry", "top_k", "top_p", "typ_p", "typical_p", "min_p", "top_n_sigma", "xtc", "infill", "temperature",
      "penalties", "adaptive_p"};
  if (const json* v = field(body, "samplers")) {
    if (!v->is_array() && !v->is_string()) bad_type("samplers", "an array of sampler names", *v);
    if (v->is_array())
      for (const json& name : *v)
        if (!name.is_string() || !kSamplers.count(name.get<std::string>()))
          bad_value("samplers", fmt::format("{} is not one of llama.cpp's sampler names.", name.dump()));
  }
  if (const json* v = field(body, "response_fields")) {
    if (!v->is_array()) bad_type("response_fields", "an array of field names", *v);
    for (const json& name : *v) {
      if (!name.is_string()) bad_type("response_fields", "an array of field names", name);
      r.response_fields.push_back(name.get<std::string>());
    }
  }
}

// llama-server's n_probs: the most likely alternatives per token, as
// logprobs (chat) or the legacy logprobs count (completions) ask.
void read_n_probs(const json& body, GenerationRequest& r) {
  int64_t n = 0;
  if (read_integer(body, "n_probs", 0, 20, n) && n > 0) r.options.logprobs = static_cast<int>(n);
}

// Every parameter a request may carry: what this server honours, and the
// few that ask nothing of a generation (who the caller is, whether OpenAI
// should store the reply, llama-server's prompt cache switch: the cache is
// always used and changes no bit). Anything else is refused by name, so a
// client never gets a silently different answer (docs/server-api.md).
const std::set<std::string, std::less<>> kCommonParameters = {
    "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n_predict", "n",
    "temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repeat_penalty", "top_k",
    "repeat_last_n", "ignore_eos", "seed", "speculative", "speculative.n_max", "speculative.n_min",
    "speculative.p_min", "stop", "functions", "function_call", "logit_bias", "n_probs", "response_format",
    "json_schema", "grammar", "user", "metadata", "store", "service_tier", "cache_prompt"};

void refuse_unknown(const json& body, std::initializer_list<std::string_view> own) {
  for (const auto& [key, value] : body.items()) {
    if (kCommonParameters.count(key) || std::find(own.begin(), own.end(), key) != own.end()) continue;
    throw ApiError(400, fmt::format("Unrecognized request argument supplied: {}", key), "invalid_request_error", key,
                   "unknown_parameter");
  }
  if (const json* v = field(body, "cache_prompt"); v && !v->is_boolean()) bad_type("cache_prompt", "a boolean", *v);
  for (const char* key : {"user", "service_tier"})
    if (const json* v = field(body, key); v && !v->is_string()) bad_type(key, "a string", *v);
  if (const json* v = field(body, "store"); v && !v->is_boolean()) bad_type("store", "a boolean", *v);
  if (const json* v = field(body, "metadata"); v && !v->is_object()) bad_type("metadata", "an object", *v);
}

std::string message_content(const json& content, const std::string& role, size_t index) {
  const std::string key = fmt::format("messages[{}].content", index);
  if (content.is_null()) {
    // An assistant turn that only called tools has no content.
    if (role == "assistant") return {};
    bad_type(key, "a string or an array of content parts", content);
  }
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_type(key, "a string or an array of content parts", content);
  std::string text;
  for (size_t p = 0; p < content.size(); ++p) {
    const json& part = content[p];
    const std::string part_key = fmt::format("{}[{}]", key, p);
    if (!part.is_object()) bad_type(part_key, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string()) bad_value(part_key, "a content part needs a string 'type'.");
    if (*type != "text")
      unsupported(part_key + ".type", fmt::format("content parts of type '{}' (only 'text')", type->get<std::string>()));
    const json* t = field(part, "text");
    if (!t || !t->is_string()) bad_value(part_key, "a text part needs a string 'text'.");
    text += t->get<std::string>();
  }
  return text;
}

}  // namespace

namespace {
// The object key whose value begins just before byte `pos`: which parameter
// a client's encoder broke (NaN, Infinity, 1e400), so the 400 can name it.
std::string key_before(const std::string& body, size_t pos) {
  static const std::regex key(R"rx("((?:[^"\\]|\\.){1,64})"\s*:\s*[^,:{}\[\]"]*$)rx");
  const size_t end = std::min(pos, body.size());
  const size_t begin = end > 256 ? end - 256 : 0;
  const std::string prefix = body.substr(begin, end - begin);
  std::smatch m;
  return std::regex_search(prefix, m, key) ? m[1].str() : std::string();
}
}  // namespace

// How deep the body's arrays and objects nest, strings skipped. Copying,
// printing and templating a value recurse through it, so a body nested a
// hundred thousand levels deep must be refused before any of that.
int json_depth(const std::string& body) {
  int deepest = 0;
  walk_json_brackets(body, 0, [&](size_t, int depth) {
    deepest = std::max(deepest, depth);
    return true;
  });
  return deepest;
}

json parse_json_body(const std::string& body) {
  constexpr int kMaxDepth = 64;
  if (json_depth(body) > kMaxDepth)
    throw ApiError(400, fmt::format("The JSON body nests deeper than {} levels.", kMaxDepth), "invalid_request_error",
                   "", "invalid_json");
  json value;
  try {
    value = json::parse(body);
  } catch (const json::parse_error& e) {
    // Our words, not the library's: where it broke, and which field.
    const size_t at = e.byte > 0 ? e.byte - 1 : 0;
    const std::string param = key_before(body, at);
    throw ApiError(400,
                   param.empty() ? fmt::format("We could not parse the JSON body of your request (at byte {}).", at)
                                 : fmt::format("Invalid '{}': not a valid JSON value (at byte {}).", param, at),
                   "invalid_request_error", param, param.empty() ? "invalid_json" : "invalid_value");
  } catch (const json::exception&) {
    // A number too large for a double (1e400): find it and name its field.
    static const std::regex huge(R"rx([-+]?\d+(?:\.\d+)?[eE][-+]?\d{3,})rx");
    std::smatch m;
    std::string param;
    if (std::regex_search(body, m, huge)) param = key_before(body, static_cast<size_t>(m.position(0)));
    throw ApiError(400,
                   param.empty() ? std::string("A number in the JSON body is too large to represent.")
                                 : fmt::format("Invalid '{}': the number is too large to represent.", param),
                   "invalid_request_error", param, "invalid_value");
  }
  if (!value.is_object())
    throw ApiError(400, fmt::format("The request body must be a JSON object, but got {}.", type_name(value)),
                   "invalid_request_error", "", "invalid_json");
  return value;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}].
void read_tools(const nlohmann::ordered_json& tools, GenerationRequest& r) {
  static const std::regex kName("[a-zA-Z0-9_-]{1,64}");
  if (!tools.is_array()) bad_type("tools", "an array", json::parse(tools.dump()));
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    const std::string key = fmt::format("tools[{}]", i);
    if (!t.is_object()) bad_type(key, "an object", json::parse(t.dump()));
    if (!t.contains("type") || t["type"] != "function")
      bad_value(key + ".type", "only tools of type 'function' are supported.");
    if (!t.contains("function") || !t["function"].is_object())
      missing_parameter(key + ".function");
    const auto& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || !std::regex_match(fn["name"].get<std::string>(), kName))
      bad_value(key + ".function.name", "expected a name of 1 to 64 letters, digits, '_' or '-'.");
    if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null())
      bad_type(key + ".function.parameters", "an object", json::parse(fn["parameters"].dump()));
    r.tool_names.push_back(fn["name"].get<std::string>());
  }
  if (!tools.empty()) r.tools = tools;
}

void read_tool_choice(const json& body, GenerationRequest& r) {
  const json* v = field(body, "tool_choice");
  if (!v) return;
  std::string choice;
  if (v->is_string()) {
    choice = v->get<std::string>();
    if (choice != "none" && choice != "auto" && choice != "required")
      bad_value("tool_choice", fmt::format("expected 'none', 'auto', 'required' or a function, but got '{}'.", choice));
  } else if (v->is_object()) {
    choice = "a named function";
  } else {
    bad_type("tool_choice", "a string or an object", *v);
  }
  if (choice == "none") {
    r.tools = nullptr;  // the template is not shown the tools, and nothing is parsed as a call
    r.tool_names.clear();
    return;
  }
  if (choice == "auto") return;
  if (r.tool_names.empty()) bad_value("tool_choice", "a call is asked for, but no tools are offered.");
  r.tool_call_forced = true;
  if (v->is_object()) {  // {"type": "function", "function": {"name": …}}
    const json* fn = field(*v, "function");
    const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string())
      bad_value("tool_choice", "expected {\"type\": \"function\", \"function\": {\"name\": …}}.");
    r.forced_tool = name->get<std::string>();
    if (std::find(r.tool_names.begin(), r.tool_names.end(), r.forced_tool) == r.tool_names.end())
      bad_value("tool_choice", fmt::format("no offered tool is named '{}'.", r.forced_tool));
    r.tool_names = {r.forced_tool};
  }
}

GenerationRequest parse_chat_request(const json& body, const RequestDefaults& defaults,
                                     const nlohmann::ordered_json& ordered_body) {
  refuse_unknown(body, {"messages", "tools", "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs",
                       "chat_template_kwargs"});
  GenerationRequest r;
  r.chat = true;
  read_common(body, defaults, r);
  const nlohmann::ordered_json ordered =
      ordered_body.is_object() ? ordered_body : nlohmann::ordered_json::parse(body.dump());
  read_constraint(ordered, r);
  if (const auto it = ordered.find("tools"); it != ordered.end() && !it->is_null()) read_tools(*it, r);
  read_tool_choice(body, r);
  read_bool(body, "parallel_tool_calls", r.parallel_tool_calls);
  bool logprobs = false;
  read_bool(body, "logprobs", logprobs);
  int64_t top = 0;
  if (read_integer(body, "top_logprobs", 0, 20, top) && !logprobs)
    bad_value("top_logprobs", "'logprobs' must be set to true when 'top_logprobs' is used.");
  r.options.logprobs = logprobs ? static_cast<int>(top) : -1;
  read_n_probs(body, r);

  const json* messages = field(body, "messages");
  if (!messages) missing_parameter("messages");
  if (!messages->is_array()) bad_type("messages", "an array", *messages);
  if (messages->empty()) bad_value("messages", "expected an array with at least 1 message, but got an empty array.");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string key = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad_type(key, "an object", m);
    const json* role = field(m, "role");
    if (!role) missing_parameter(key + ".role");
    if (!role->is_string()) bad_type(key + ".role", "a string", *role);
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";  // OpenAI's new name for the system turn
    if (name != "system" && name != "user" && name != "assistant" && name != "tool")
      bad_value(key + ".role",
                fmt::format("role '{}' is not supported; expected 'system', 'developer', 'user', 'assistant' or "
                            "'tool'.", role->get<std::string>()));
    auto content = m.find("content");
    const bool calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
    if (content == m.end() && !(name == "assistant" && calls))
      missing_parameter(key + ".content");
    const std::string text = content == m.end() ? std::string() : message_content(*content, name, i);
    r.messages.push_back({name, text});
    // As the template sees it: the client's fields, the role mapped, the text joined.
    nlohmann::ordered_json as_sent = ordered["messages"][i];
    as_sent["role"] = name;
    as_sent["content"] = (content == m.end() || content->is_null()) && calls ? nlohmann::ordered_json(nullptr)
                                                                           : nlohmann::ordered_json(text);
    r.messages_json.push_back(std::move(as_sent));
  }
  // llama-server's switch for thinking models (Qwen3's template reads it).
  if (const json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) bad_type("chat_template_kwargs", "an object", *kwargs);
    r.template_kwargs = ordered["chat_template_kwargs"];
    bool thinking = true;
    if (read_bool(*kwargs, "enable_thinking", thinking)) r.reasoning = thinking;
  }
  return r;
}

GenerationRequest parse_translated_chat(const nlohmann::ordered_json& chat, const RequestDefaults& defaults,
                                        const std::function<std::string(const std::string&)>& field_of) {
  GenerationRequest r;
  try {
    r = parse_chat_request(json::parse(chat.dump()), defaults, chat);
  } catch (const ApiError& e) {
    const std::string field = field_of(e.param);
    std::string message = e.what();
    if (const size_t at = message.find("'" + e.param + "'"); at != std::string::npos && field != e.param)
      message.replace(at, e.param.size() + 2, "'" + field + "'");
    throw ApiError(e.status, message, e.type, field, e.code);
  }
  if (!r.constrained_by.empty()) r.constrained_by = field_of(r.constrained_by);
  return r;
}

namespace {
const json& required_prompt(const json& body) {
  const json* prompt = field(body, "prompt");
  if (!prompt) missing_parameter("prompt");
  return *prompt;
}
}  // namespace

GenerationRequest parse_completion_request(const json& body, const RequestDefaults& defaults,
                                           const nlohmann::ordered_json& ordered_body) {
  if (const json* v = field(body, "tools"); v && !(v->is_array() && v->empty()))
    unsupported("tools", "tools are offered through /v1/chat/completions");
  refuse_unknown(body, {"prompt", "logprobs", "echo", "best_of", "suffix", "tools"});
  GenerationRequest r;
  read_common(body, defaults, r);
  read_constraint(ordered_body.is_object() ? ordered_body : nlohmann::ordered_json::parse(body.dump()), r);
  // The legacy API's logprobs: how many alternatives per token (OpenAI allows 5; llama-server more).
  int64_t logprobs = 0;
  if (read_integer(body, "logprobs", 0, 20, logprobs)) r.options.logprobs = static_cast<int>(logprobs);
  read_n_probs(body, r);
  if (const json* v = field(body, "echo"); v && v->is_boolean() && v->get<bool>())
    unsupported("echo", "the prompt is not echoed");
  if (const json* v = field(body, "best_of"); v && !(v->is_number() && v->get<double>() == 1))
    unsupported("best_of", "only best_of = 1");
  if (const json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
    unsupported("suffix", "insertion is not supported");

  const json* prompt = &required_prompt(body);
  if (prompt->is_array()) {
    // One choice per prompt in OpenAI's API; this server answers one.
    if (prompt->size() != 1 || !(*prompt)[0].is_string())
      bad_value("prompt", "expected a string or an array of exactly one string.");
    r.prompt = (*prompt)[0].get<std::string>();
  } else if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
  } else {
    bad_type("prompt", "a string", *prompt);
  }
  return r;
}

GenerationRequest parse_native_completion_request(const json& body, const RequestDefaults& defaults,
                                                  const nlohmann::ordered_json& ordered_body) {
  refuse_unknown(body, {"prompt", "n_indent", "t_max_predict_ms", "t_max_prompt_ms", "samplers", "response_fields"});
  GenerationRequest r;
  r.native = true;
  read_common(body, defaults, r);
  read_constraint(ordered_body.is_object() ? ordered_body : nlohmann::ordered_json::parse(body.dump()), r);
  read_n_probs(body, r);
  read_code_completion_limits(body, r);
  const json* prompt = &required_prompt(body);
  auto token_ids = [](const json& list) {
    return !list.empty() && std::all_of(list.begin(), list.end(), [](const json& t) { return t.is_number_integer(); });
  };
  const json* one = prompt;
  // One prompt per request here (llama-server answers a list of them with a list).
  if (prompt->is_array() && !token_ids(*prompt)) {
    if (prompt->size() != 1) bad_value("prompt", "expected a string, token ids, or an array of exactly one of those.");
    one = &(*prompt)[0];
  }
  if (one->is_string()) {
    r.prompt = one->get<std::string>();
  } else if (one->is_array() && token_ids(*one)) {
    for (const json& t : *one) {
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<TokenId>::max()) bad_value("prompt", fmt::format("token {} is not a token id.", id));
      r.prompt_tokens.push_back(static_cast<TokenId>(id));
    }
  } else {
    bad_value("prompt", "expected a string or token ids (text and ids mixed in one prompt are not supported).");
  }
  return r;
}

}  // namespace shoal::server
