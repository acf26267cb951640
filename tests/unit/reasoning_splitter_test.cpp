// The reasoning/answer split of a thinking model's output, whole and piece
// by piece (a stream may cut a tag anywhere).
#include "server/reasoning_splitter.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "test_files.h"

namespace shoal::server {
namespace {

ReasoningSplitter::Parts split_in_pieces(const std::string& text, size_t piece, ReasoningMarkers markers,
                                         bool opened) {
  ReasoningSplitter s(markers, opened);
  ReasoningSplitter::Parts all;
  for (size_t i = 0; i < text.size(); i += piece) {
    auto p = s.feed(std::string_view(text).substr(i, piece));
    all.reasoning += p.reasoning;
    all.content += p.content;
  }
  auto p = s.finish();
  all.reasoning += p.reasoning;
  all.content += p.content;
  return all;
}

void expect_split(const std::string& text, const std::string& reasoning, const std::string& content,
                  ReasoningMarkers markers = {}, bool opened = false) {
  for (size_t piece : {text.size() + 1, size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{8}}) {
    auto p = split_in_pieces(text, piece, markers, opened);
    EXPECT_EQ(p.reasoning, reasoning) << "pieces of " << piece << " of " << text;
    EXPECT_EQ(p.content, content) << "pieces of " << piece << " of " << text;
  }
}

TEST(ReasoningSplitter, LeadingThinkBlockIsReasoning) {
  expect_split("<think>\nLet me see. 2+2 is 4.\n</think>\n\nIt is 4.", "Let me see. 2+2 is 4.", "It is 4.");
  expect_split("\n<think>a < b</think>answer", "a < b", "answer");
}

TEST(ReasoningSplitter, EmptyBlockLeavesOnlyTheAnswer) {
  expect_split("<think>\n\n</think>\n\nParis.", "", "Paris.");
}

TEST(ReasoningSplitter, TextWithoutABlockIsAllContent) {
  expect_split("Paris is the capital.", "", "Paris is the capital.");
  expect_split("<b>bold</b> and <think>later</think>", "", "<b>bold</b> and <think>later</think>");
  expect_split("<thin", "", "<thin");
}

// QwQ and DeepSeek R1 end the prompt with "<think>\n": the output starts
// inside the block and only closes it.
TEST(ReasoningSplitter, APromptThatOpenedTheBlockMakesTheOutputStartInsideIt) {
  expect_split("2 + 2 is 4.\n</think>\n\nIt is 4.", "2 + 2 is 4.", "It is 4.", {}, true);
  expect_split("\nStill thinking", "Still thinking", "", {}, true);
  expect_split("</think>Paris.", "", "Paris.", {}, true);
}

TEST(ReasoningSplitter, CutOffInsideTheBlockIsStillReasoning) {
  expect_split("<think>\nStep one, step two", "Step one, step two", "");
  expect_split("<think>almost done</thi", "almost done</thi", "");
}

// gpt-oss (harmony): the analysis channel is the reasoning, the final
// channel the answer; the header between them is neither. (The template's
// markers: tokenizer/chat_template.cpp; <|return|> is a stop string.)
TEST(ReasoningSplitter, HarmonyChannelsSplitReasoningFromAnswer) {
  const ReasoningMarkers harmony = ChatTemplate::detect("gpt-oss").reasoning_markers();
  expect_split("<|channel|>analysis<|message|>User asks capital. Paris.<|end|><|start|>assistant<|channel|>final"
               "<|message|>The capital is Paris.",
               "User asks capital. Paris.", "The capital is Paris.", harmony);
  expect_split("<|channel|>final<|message|>Paris.", "", "Paris.", harmony);  // no reasoning at all
  expect_split("<|channel|>analysis<|message|>cut off mid", "cut off mid", "", harmony);
  expect_split("<|channel|>analysis<|message|>done<|end|><|start|>assist", "done", "", harmony);
  expect_split("plain text", "", "plain text", harmony);
}

// Gemma 4 thinks in a channel (its own template, as llama.cpp keeps it): the
// thought between <|channel>thought and <channel|> is the reasoning; the
// template ends the prompt with an empty one when thinking is off, so the
// output is then all answer.
TEST(ReasoningSplitter, GemmaFourThoughtChannelIsReasoning) {
  std::ifstream in(testing::test_data_dir() + "/chat-templates/google-gemma-4-31B-it.jinja");
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(source.empty());
  const ChatTemplate tmpl = ChatTemplate::detect(source);
  EXPECT_TRUE(tmpl.thinks());
  const ReasoningMarkers gemma = tmpl.reasoning_markers();
  expect_split("<|channel>thought\nThe user wants a capital.<channel|>Paris.", "The user wants a capital.", "Paris.",
               gemma);
  expect_split("Paris.", "", "Paris.", gemma);
  expect_split("<|channel>thought\ncut off mid", "cut off mid", "", gemma);
}

}  // namespace
}  // namespace shoal::server
