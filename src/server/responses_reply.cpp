// The Responses API's answer: a response object whose output holds a
// reasoning item (a thinking model's), a message with one output_text part,
// and a function_call item per call; or the stream of typed events, each
// with its sequence_number, that ends with response.completed (or
// response.incomplete at max_output_tokens) carrying the whole response.
#include "server/openai_responses.h"

namespace shoal::server {
namespace {

class ResponsesReplyFormat : public ReplyFormat {
 public:
  ResponsesReplyFormat(const ResponseMeta& meta, const Tokenizer& tokenizer, json echo)
      : meta_(meta), tokenizer_(tokenizer), echo_(std::move(echo)) {
    chat_meta_ = meta;
    chat_meta_.chat = true;  // logprobs in chat's per-token shape
  }

  json whole(const Reply& r) override {
    json output = json::array();
    if (!r.reasoning.empty()) output.push_back(reasoning_item(random_id("rs_"), r.reasoning));
    if (!r.content.empty() || r.calls.empty())
      output.push_back(message_item(random_id("msg_"), r.content, logprobs_of(r.logprobs), "completed"));
    for (const ToolCall& c : r.calls) output.push_back(call_item(random_id("fc_"), c, c.arguments, "completed"));
    return response(r, std::move(output));
  }

  std::string open() override {
    json created = response_base("in_progress");
    return event("response.created", {{"response", created}}) +
           event("response.in_progress", {{"response", std::move(created)}});
  }

  std::string delta(std::string_view reasoning, std::string_view content, std::vector<TokenLogprob>& logprobs) override {
    std::string out;
    if (!reasoning.empty()) {
      out += open_item(Open::Reasoning);
      text_ += reasoning;
      out += event("response.reasoning_text.delta", {{"item_id", open_id_}, {"output_index", output_.size()},
                                                     {"content_index", 0}, {"delta", std::string(reasoning)}});
    }
    if (!content.empty()) {
      out += open_item(Open::Message);
      json lp = logprobs_of(logprobs);
      logprobs.clear();
      for (const json& l : lp) logprobs_.push_back(l);
      text_ += content;
      out += event("response.output_text.delta", {{"item_id", open_id_}, {"output_index", output_.size()},
                                                  {"content_index", 0}, {"delta", std::string(content)},
                                                  {"logprobs", std::move(lp)}});
    }
    return out;
  }

  std::string finish(const Reply& r) override {
    constexpr size_t kPiece = 24;  // arguments are streamed in pieces, as OpenAI's are
    for (const json& l : logprobs_of(r.logprobs)) logprobs_.push_back(l);
    std::string out = close_item();
    if (r.calls.empty() && output_.empty()) out += open_item(Open::Message) + close_item();  // an empty answer is still a message
    for (const ToolCall& c : r.calls) {
      const std::string id = random_id("fc_");
      const size_t index = output_.size();
      out += event("response.output_item.added", {{"output_index", index}, {"item", call_item(id, c, "", "in_progress")}});
      for (size_t at = 0; at < c.arguments.size(); at += kPiece)
        out += event("response.function_call_arguments.delta",
                     {{"item_id", id}, {"output_index", index}, {"delta", c.arguments.substr(at, kPiece)}});
      out += event("response.function_call_arguments.done",
                   {{"item_id", id}, {"output_index", index}, {"name", c.name}, {"arguments", c.arguments}});
      json item = call_item(id, c, c.arguments, "completed");
      out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
      output_.push_back(std::move(item));
    }
    json done = response(r, output_);
    const char* name = done["status"] == "incomplete" ? "response.incomplete" : "response.completed";
    return out + event(name, {{"response", std::move(done)}});
  }

  std::string failure(const ApiError& e) override {
    json failed = response_base("failed");
    failed["output"] = output_;
    failed["error"] = {{"code", e.code.empty() ? "server_error" : e.code}, {"message", e.what()}};
    return event("error", {{"code", e.code.empty() ? json(nullptr) : json(e.code)}, {"message", e.what()},
                           {"param", e.param.empty() ? json(nullptr) : json(e.param)}}) +
           event("response.failed", {{"response", std::move(failed)}});
  }

 private:
  enum class Open { None, Reasoning, Message };

  std::string event(const char* type, json data) {
    data["type"] = type;
    data["sequence_number"] = sequence_++;
    return named_sse_event(type, data);
  }
  std::string part_event(const char* type, json part) {
    return event(type, {{"item_id", open_id_}, {"output_index", output_.size()}, {"content_index", 0},
                        {"part", std::move(part)}});
  }

  // Starts streaming a reasoning or message item unless it is the one open.
  std::string open_item(Open kind) {
    if (open_ == kind) return {};
    std::string out = close_item();
    open_ = kind;
    const bool reasoning = kind == Open::Reasoning;
    open_id_ = random_id(reasoning ? "rs_" : "msg_");
    json item = reasoning ? json{{"id", open_id_}, {"type", "reasoning"}, {"summary", json::array()},
                                 {"content", json::array()}}
                          : json{{"id", open_id_}, {"type", "message"}, {"status", "in_progress"},
                                 {"role", "assistant"}, {"content", json::array()}};
    out += event("response.output_item.added", {{"output_index", output_.size()}, {"item", std::move(item)}});
    return out + part_event("response.content_part.added", reasoning ? json{{"type", "reasoning_text"}, {"text", ""}}
                                                                     : output_text_part("", json::array()));
  }

  // Ends the reasoning or message item being streamed: its .done events,
  // and the item kept for the final response.
  std::string close_item() {
    if (open_ == Open::None) return {};
    std::string out;
    json item;
    if (open_ == Open::Reasoning) {
      out += event("response.reasoning_text.done",
                   {{"item_id", open_id_}, {"output_index", output_.size()}, {"content_index", 0}, {"text", text_}});
      out += part_event("response.content_part.done", {{"type", "reasoning_text"}, {"text", text_}});
      item = reasoning_item(open_id_, text_);
    } else {
      out += event("response.output_text.done", {{"item_id", open_id_}, {"output_index", output_.size()},
                                                 {"content_index", 0}, {"text", text_}, {"logprobs", logprobs_}});
      out += part_event("response.content_part.done", output_text_part(text_, logprobs_));
      item = message_item(open_id_, text_, logprobs_, "completed");
    }
    out += event("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
    output_.push_back(std::move(item));
    open_ = Open::None;
    text_.clear();
    logprobs_ = json::array();
    return out;
  }

  static json output_text_part(const std::string& text, json logprobs) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", std::move(logprobs)}};
  }
  static json reasoning_item(const std::string& id, const std::string& text) {
    return {{"id", id}, {"type", "reasoning"}, {"summary", json::array()},
            {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
  }
  static json message_item(const std::string& id, const std::string& text, json logprobs, const char* status) {
    return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"},
            {"content", json::array({output_text_part(text, std::move(logprobs))})}};
  }
  static json call_item(const std::string& id, const ToolCall& c, const std::string& arguments, const char* status) {
    return {{"id", id}, {"type", "function_call"}, {"status", status}, {"call_id", c.id}, {"name", c.name},
            {"arguments", arguments}};
  }

  // Per token: token, logprob, bytes, top_logprobs (chat's shape, which the
  // Responses API shares); empty when logprobs were not asked.
  json logprobs_of(const std::vector<TokenLogprob>& tokens) {
    size_t offset = 0;
    json j = logprobs_json(chat_meta_, tokenizer_, tokens, offset);
    return j.is_object() ? j["content"] : json::array();
  }

  json response_base(const char* status) const {
    json r = {{"id", meta_.id}, {"object", "response"}, {"created_at", meta_.created}, {"status", status},
              {"error", nullptr}, {"incomplete_details", nullptr}, {"model", meta_.model}, {"output", json::array()},
              {"usage", nullptr}};
    r.update(echo_);
    return r;
  }

  json response(const Reply& r, json output) const {
    const bool cut = r.finish_reason == "length";
    json out = response_base(cut ? "incomplete" : "completed");
    if (cut) out["incomplete_details"] = {{"reason", "max_output_tokens"}};
    out["output"] = std::move(output);
    const Usage& u = r.usage;
    out["usage"] = {{"input_tokens", u.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", u.prompt_tokens - u.prompt_computed}}},
                    {"output_tokens", u.completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", u.prompt_tokens + u.completion_tokens}};
    return out;
  }

  ResponseMeta meta_, chat_meta_;
  const Tokenizer& tokenizer_;
  json echo_;
  int sequence_ = 0;
  json output_ = json::array();  // the items done so far
  Open open_ = Open::None;       // the item being streamed
  std::string open_id_;
  std::string text_;             // its text so far
  json logprobs_ = json::array();  // its logprobs so far
};

}  // namespace

std::unique_ptr<ReplyFormat> responses_reply_format(const ResponseMeta& meta, const Tokenizer& tokenizer, json echo) {
  return std::make_unique<ResponsesReplyFormat>(meta, tokenizer, std::move(echo));
}

}  // namespace shoal::server
