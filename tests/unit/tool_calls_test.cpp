// The tool-call parser on each family's text, and the stream splitter:
// content flows until a call may start, and text that is no call is kept.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <utility>

#include <nlohmann/json.hpp>

namespace shoal::server {
namespace {

const std::vector<std::string> kTools = {"get_weather", "add"};

nlohmann::json args(const ToolCall& c) { return nlohmann::json::parse(c.arguments); }

// Each text is no call: it comes back whole as content.
void expect_text(std::initializer_list<std::string> texts) {
  for (const std::string& text : texts) {
    const ToolReply r = parse_tool_calls(text, kTools);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

// The pieces streamed through a splitter: the content it let out as they
// came, and the reply at the end.
std::pair<std::string, ToolReply> streamed(std::initializer_list<const char*> pieces) {
  ToolCallSplitter split(kTools);
  std::string content;
  for (const char* piece : pieces) content += split.feed(piece);
  return {content, split.finish()};
}

TEST(ToolCalls, HermesBlocksAmongText) {
  ToolReply r = parse_tool_calls(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 2, \\\"b\\\": 3}\"}</tool_call>",
      kTools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me look.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(args(r.calls[0])["city"], "Paris");
  EXPECT_EQ(args(r.calls[1])["b"], 3);  // arguments sent as a string are an object too
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
}

TEST(ToolCalls, Llama3AndMistral) {
  ToolReply r = parse_tool_calls("<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", kTools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(args(r.calls[0])["a"], 1);
  r = parse_tool_calls("[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, "
                       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]", kTools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "get_weather");
  r = parse_tool_calls("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}", kTools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(args(r.calls[0])["city"], "Oslo");
}

// The texts below are what each family's own chat template writes for an
// assistant turn with calls (tests/data/chat-templates, rendered by
// `shoal template` with the tool_round_trip conversation).
TEST(ToolCalls, DeepSeekKimiGlmAndGptOss) {
  ToolReply r = parse_tool_calls(
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Paris\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n"
      "```json\n{\"a\": 1, \"b\": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      kTools);  // DeepSeek V3 / R1
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Checking.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(args(r.calls[0])["unit"], "celsius");
  EXPECT_EQ(args(r.calls[1])["b"], 2);
  r = parse_tool_calls("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}"
                       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                       kTools);  // DeepSeek V3.1+
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(args(r.calls[0])["city"], "Paris");
  EXPECT_EQ(r.content, "");
  r = parse_tool_calls("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                       "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"unit\": \"celsius\"}<|tool_call_end|>"
                       "<|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>{\"a\": 4, \"b\": 5}"
                       "<|tool_call_end|><|tool_calls_section_end|>",
                       kTools);  // Kimi K2
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[1].name, "add");
  EXPECT_EQ(args(r.calls[1])["a"], 4);
  r = parse_tool_calls("Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                       "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>\n<tool_call>add\n"
                       "<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n<arg_key>b</arg_key>\n<arg_value>3</arg_value>\n"
                       "</tool_call>",
                       kTools);  // GLM 4.5+: values that read as JSON are JSON
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me check.");
  EXPECT_EQ(args(r.calls[0])["city"], "Paris");
  EXPECT_EQ(args(r.calls[1])["a"], 2);
  r = parse_tool_calls("<tool_call>not_offered\n<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>", kTools);
  EXPECT_TRUE(r.calls.empty());  // a GLM-shaped block naming no offered tool stays text
  r = parse_tool_calls("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather"
                       "<|channel|>commentary json<|message|>{\"city\": \"Paris\"}",
                       kTools);  // gpt-oss
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(args(r.calls[0])["city"], "Paris");
  r = parse_tool_calls("<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 1}",
                       kTools);  // gpt-oss, the recipient after the channel
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "add");
}

TEST(ToolCalls, StreamedFamilyMarkersHoldTheCall) {
  const auto [content, r] = streamed({"Sure", ". <|tool_calls_", "section_begin|><|tool_call_begin|>functions.add:0",
                                      "<|tool_call_argument_begin|>{\"a\": 1,", " \"b\": 2}<|tool_call_end|>",
                                      "<|tool_calls_section_end|>"});
  EXPECT_EQ(content, "Sure. ");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(args(r.calls[0])["b"], 2);
}

// Gemma 4: <|tool_call>call:NAME{…}<tool_call|>, its arguments in Gemma's
// notation (bare keys, strings between <|"|> markers), as its template
// writes them back; the text around the calls is content.
TEST(ToolCalls, GemmaFourCallsAreCalls) {
  ToolReply r = parse_tool_calls(
      "Checking.<|tool_call>call:get_weather{city:<|\"|>Paris, France<|\"|>,days:3,metric:true,"
      "opts:{tags:[<|\"|>a<|\"|>,<|\"|>b:c<|\"|>],depth:-1.5,none:None}}<tool_call|>"
      "<|tool_call>call:add{a:2,b:{}}<tool_call|>",
      kTools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Checking.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  const nlohmann::json a = args(r.calls[0]);
  EXPECT_EQ(a["city"], "Paris, France");
  EXPECT_EQ(a["days"], 3);
  EXPECT_EQ(a["metric"], true);
  EXPECT_EQ(a["opts"]["tags"], nlohmann::json::array({"a", "b:c"}));
  EXPECT_EQ(a["opts"]["depth"], -1.5);
  EXPECT_TRUE(a["opts"]["none"].is_null());
  EXPECT_EQ(r.calls[1].name, "add");
  EXPECT_EQ(args(r.calls[1])["b"], nlohmann::json::object());
  // Broken calls stay text: no "call:", unclosed arguments, an unclosed string.
  expect_text({"<|tool_call>get_weather{}<tool_call|>", "<|tool_call>call:add{a:1<tool_call|>",
               "<|tool_call>call:add{a:<|\"|>x}<tool_call|>"});
  // Streamed: the content before the call goes out, the call is held.
  const auto [content, held] = streamed({"Sure", ". <|tool", "_call>call:add{a:", "1,b:2}<tool_call|>"});
  EXPECT_EQ(content, "Sure. ");
  ASSERT_EQ(held.calls.size(), 1u);
  EXPECT_EQ(args(held.calls[0])["b"], 2);
}

// MiniMax M2's XML: invokes in a <minimax:tool_call> section, each
// parameter's value JSON where it reads as JSON (the newlines MiniMax puts
// around a value are not part of it), the text before the section content.
TEST(ToolCalls, MiniMaxM2InvokesAreCalls) {
  ToolReply r = parse_tool_calls("<think>It needs the weather.</think>Checking.\n<minimax:tool_call>\n"
                                 "<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
                                 "<parameter name=\"unit\">\ncelsius\n</parameter>\n</invoke>\n"
                                 "<invoke name=\"add\">\n<parameter name=\"a\">2</parameter>\n"
                                 "<parameter name=\"b\">{\"x\": [1]}</parameter>\n</invoke>\n</minimax:tool_call>",
                                 kTools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "<think>It needs the weather.</think>Checking.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(args(r.calls[0])["city"], "Paris");
  EXPECT_EQ(args(r.calls[0])["unit"], "celsius");
  EXPECT_EQ(r.calls[1].name, "add");
  EXPECT_EQ(args(r.calls[1])["a"], 2);
  EXPECT_EQ(args(r.calls[1])["b"]["x"][0], 1);
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  // A call with no parameters; single quotes around the name.
  r = parse_tool_calls("<minimax:tool_call><invoke name='add'></invoke></minimax:tool_call>", kTools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
  // Broken sections stay text: no name, an unclosed invoke or parameter.
  expect_text({"<minimax:tool_call><invoke>x</invoke></minimax:tool_call>",
               "<minimax:tool_call><invoke name=\"add\"><parameter name=\"a\">1</minimax:tool_call>",
               "<minimax:tool_call><invoke name=\"add\"><parameter name=\"a\">1</invoke>"});
  // Streamed: the content before the section goes out, the section is held.
  const auto [content, held] = streamed({"Sure", ". <minimax:", "tool_call>\n<invoke name=\"add\">",
                                         "<parameter name=\"a\">1", "</parameter></invoke>\n</minimax:tool_call>"});
  EXPECT_EQ(content, "Sure. ");
  ASSERT_EQ(held.calls.size(), 1u);
  EXPECT_EQ(args(held.calls[0])["a"], 1);
}

TEST(ToolCalls, BareOrFencedCallsNamingOfferedTools) {
  ToolReply r = parse_tool_calls("```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```", kTools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "");
  r = parse_tool_calls("{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n"
                       "{\"name\": \"add\", \"arguments\": {\"a\": 3, \"b\": 4}}", kTools);
  EXPECT_EQ(r.calls.size(), 2u);
  // JSON that names no offered tool, or is followed by text, is an answer.
  expect_text({"{\"name\": \"Alice\", \"age\": 3}", "{\"name\": \"add\"} and more",
               "{\"name\": \"add\", \"arguments\": {\"a\": 1", "Just text."});
  // A broken block stays text.
  r = parse_tool_calls("<tool_call>{not json}</tool_call>", kTools);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "<tool_call>{not json}</tool_call>");
}

TEST(ToolCalls, StreamSplitterSendsContentUntilACallMayStart) {
  ToolCallSplitter split(kTools);
  std::string sent;
  for (std::string piece : {"Sure, ", "checking <tool", "_call>{\"name\": \"add\", ", "\"arguments\": {\"a\": 1, \"b\": 2}}",
                            "</tool_call>"})
    sent += split.feed(piece);
  EXPECT_EQ(sent, "Sure, checking ");
  ToolReply r = split.finish();
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(args(r.calls[0])["b"], 2);

  ToolCallSplitter plain(kTools);
  sent = plain.feed("Hello <to");
  EXPECT_EQ(sent, "Hello ");  // "<to" may open <tool_call>: held
  sent += plain.feed("day> world");
  EXPECT_EQ(sent + plain.finish().content, "Hello <today> world");

  ToolCallSplitter json_answer(kTools);
  sent = json_answer.feed("  {\"x\": 1}");
  EXPECT_EQ(sent, "");
  r = json_answer.finish();
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "  {\"x\": 1}");
}

}  // namespace
}  // namespace shoal::server
