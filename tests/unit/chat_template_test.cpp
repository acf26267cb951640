// Expected renderings come from llama.cpp's tests/test-chat-template.cpp and
// from rendering the real templates with jinja2 as HF's apply_chat_template
// does (trim_blocks, lstrip_blocks), less the leading BOS text, which the
// tokenizer adds.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>

#include "util/error.h"

namespace shoal {
namespace {

// llama.cpp's test conversation: system, two exchanges, a last user turn,
// and a reply with spaces around it to show which formats trim.
const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

std::vector<ChatMessage> without_system() {
  return {kConversation.begin() + 1, kConversation.end()};
}

// teknium/OpenHermes-2.5-Mistral-7B
const char* kChatML =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

// meta-llama/Meta-Llama-3-8B-Instruct
const char* kLlama3 =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";

// meta-llama/Llama-2-7b-chat-hf
const char* kLlama2 =
    R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";

// TheBloke/FusionNet_34Bx2_MoE-AWQ (llama2-sys-bos)
const char* kFusionNet =
    "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n"
    "{%- if idx > 1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n"
    "{%- else -%}\n{{- messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n"
    "{% elif messages[idx]['role'] == 'system' %}\n"
    "{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n"
    "{%- elif messages[idx]['role'] == 'assistant' -%}\n"
    "{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n{% endfor %}";

// mistralai/Mistral-7B-Instruct-v0.2 (shaped like Llama 2, no system slot)
const char* kMistralV02 =
    R"({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})";

// Mistral's official 'v1' template
const char* kMistralV1 =
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n    {%- endif %}\n{%- endfor %}\n";

// Mistral 'v3' (Mistral-7B-Instruct-v0.3, Large-2407), tool part shortened
const char* kMistralV3 = R"JINJA({%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none %}
            {{- "[AVAILABLE_TOOLS] [" + tools|tojson + "][/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- endif %}
{%- endfor %}
)JINJA";

// Mistral 'v3-tekken' (Mistral-Nemo-Instruct-2407), tool part shortened
const char* kMistralTekken = R"JINJA({%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none %}
            {{- "[AVAILABLE_TOOLS][" + tools|tojson + "][/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST]" + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST]" + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message["role"] == "assistant" %}
        {{- message["content"] + eos_token}}
    {%- endif %}
{%- endfor %}
)JINJA";

// mistralai/Mistral-Large-Instruct-2411 ('v7')
const char* kMistralV7 =
    R"({{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}{% endfor %})";

// google/gemma-2-2b-it
const char* kGemma =
    R"({{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})";

// microsoft/Phi-3.5-mini-instruct
const char* kPhi3 =
    R"({% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %})";

// microsoft/phi-4
const char* kPhi4 =
    R"({% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %})";

// TinyLlama/TinyLlama-1.1B-Chat-v1.0 and HuggingFaceH4/zephyr-7b-beta
const char* kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n"
    "{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

// HuggingFaceTB/SmolLM2-135M-Instruct, as stored in its GGUF
// (tokenizer.chat_template; the newlines inside the quotes are real ones).
const char* kSmolLM2 = R"JINJA({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})JINJA";

// Qwen/Qwen2.5-0.5B-Instruct, the branch without tools
const char* kQwen25 = R"JINJA({%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)JINJA";

struct Case {
  const char* source;
  ChatFormat format;
  const char* name;
  const char* expected;  // kConversation with a generation prompt
};

const Case kCases[] = {
    {kChatML, ChatFormat::ChatML, "chatml",
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
     "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
     "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {kLlama3, ChatFormat::Llama3, "llama3",
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {kLlama2, ChatFormat::Llama2, "llama2-sys-strip",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s>"
     "<s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]"},
    {kFusionNet, ChatFormat::Llama2, "llama2-sys-bos",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s>"
     "<s>[INST] Who are you [/INST]    I am an assistant    </s><s>[INST] Another question [/INST]"},
    // HF raises on the system message; llama.cpp folds it into the first turn.
    {kMistralV02, ChatFormat::Llama2, "llama2",
     "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]"
     "   I am an assistant   </s>[INST] Another question [/INST]"},
    {kMistralV1, ChatFormat::Mistral, "mistral-v1",
     " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]"
     "    I am an assistant   </s> [INST] Another question [/INST]"},
    {kMistralV3, ChatFormat::Mistral, "mistral-v3",
     "[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>"
     "[INST] You are a helpful assistant\n\nAnother question[/INST]"},
    {kMistralTekken, ChatFormat::Mistral, "mistral-v3-tekken",
     "[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   </s>"
     "[INST]You are a helpful assistant\n\nAnother question[/INST]"},
    {kMistralV7, ChatFormat::MistralV7, "mistral-v7",
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>"
     "[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
    // Gemma 2 raises on a system message; Gemma 3 and llama.cpp fold it in.
    {kGemma, ChatFormat::Gemma, "gemma",
     "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
     "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n"
     "<start_of_turn>model\nI am an assistant<end_of_turn>\n"
     "<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
    {kPhi3, ChatFormat::Phi3, "phi3",
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n"
     "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n"
     "<|user|>\nAnother question<|end|>\n<|assistant|>\n"},
    {kPhi4, ChatFormat::Phi4, "phi4",
     "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|>"
     "<|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|>"
     "<|im_start|>assistant<|im_sep|>   I am an assistant   <|im_end|>"
     "<|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>"},
    {kZephyr, ChatFormat::Zephyr, "zephyr",
     "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n"
     "<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n"
     "<|user|>\nAnother question</s>\n<|assistant|>\n"},
};

TEST(ChatTemplate, DetectsAndRendersEachFormat) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const ChatTemplate t = ChatTemplate::detect(c.source);
    EXPECT_EQ(t.format(), c.format);
    EXPECT_STREQ(t.name(), c.name);
    EXPECT_FALSE(t.fell_back());
    EXPECT_TRUE(t.default_system().empty());
    EXPECT_EQ(t.render(kConversation, true), c.expected);
  }
}

TEST(ChatTemplate, RendersWithoutSystemAsJinjaDoes) {
  // Formats that have no system slot (Gemma 2, Mistral v0.2) render exactly
  // as HF does once the conversation has no system message.
  EXPECT_EQ(ChatTemplate::detect(kGemma).render(without_system(), true),
            "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n"
            "<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n"
            "<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(ChatTemplate::detect(kMistralV02).render(without_system(), true),
            "[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>"
            "[INST] Another question [/INST]");
  EXPECT_EQ(ChatTemplate::detect(kLlama2).render(without_system(), true),
            "[INST] Hello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s>"
            "<s>[INST] Another question [/INST]");
}

TEST(ChatTemplate, SmolLM2InsertsItsDefaultSystemMessage) {
  const ChatTemplate t = ChatTemplate::detect(kSmolLM2);
  EXPECT_EQ(t.format(), ChatFormat::ChatML);
  EXPECT_FALSE(t.fell_back());
  EXPECT_EQ(t.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(t.render({{"user", "What is the capital of France?"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // A system message of the caller's own replaces the default.
  EXPECT_EQ(t.render(kConversation, true), kCases[0].expected);
}

TEST(ChatTemplate, Qwen25DefaultSystemFromElseBranch) {
  const ChatTemplate t = ChatTemplate::detect(kQwen25);
  EXPECT_EQ(t.default_system(), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(t.render({{"user", "Hi"}}, false),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, EmptyFallsBackToChatML) {
  const ChatTemplate t = ChatTemplate::detect("");
  EXPECT_EQ(t.format(), ChatFormat::ChatML);
  EXPECT_TRUE(t.fell_back());
  EXPECT_FALSE(t.unknown());
  EXPECT_EQ(t.render({{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, UnknownTemplateIsRefusedWithTheWayOut) {
  for (const char* source : {"{{ messages }}", "{% for m in messages %}{{ m.content }}{% endfor %}"}) {
    const ChatTemplate t = ChatTemplate::detect(source);
    EXPECT_TRUE(t.unknown()) << source;
    try {
      t.render({{"user", "Hi"}}, true);
      FAIL() << "rendered an unknown template: " << source;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("chatml"), std::string::npos) << e.what();
    }
  }
}

// The parts of Qwen3's template that matter here (written for this test
// from its structure: ChatML, earlier answers without their <think> block,
// an empty block when enable_thinking is false).
const char* kQwen3 = R"JINJA({%- for message in messages %}
{%- if message.role == "assistant" %}
{%- set content = message.content %}
{%- if '</think>' in message.content %}
{%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
{%- endif %}
{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}
{{- '<think>\n\n</think>\n\n' }}
{%- endif %}
{%- endif %})JINJA";

// Gemma 3's template in the shape Google ships it (written for this test):
// the system text opens the first user turn, the assistant is "model".
const char* kGemma3 = R"JINJA({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- set first_user_prefix = "" -%}
{%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
{%- if (message['role'] == 'assistant') -%}{%- set role = "model" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}
{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
{{ message['content'] | trim }}<end_of_turn>
{% endfor -%}
{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%})JINJA";

TEST(ChatTemplate, Gemma3FoldsTheSystemTextIntoTheFirstTurn) {
  const ChatTemplate t = ChatTemplate::detect(kGemma3);
  EXPECT_EQ(t.format(), ChatFormat::Gemma);
  EXPECT_FALSE(t.thinks());
  EXPECT_EQ(t.render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}}, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, Qwen3ThinksUnlessReasoningIsOff) {
  const ChatTemplate t = ChatTemplate::detect(kQwen3);
  EXPECT_EQ(t.format(), ChatFormat::ChatML);
  EXPECT_TRUE(t.thinks());
  EXPECT_EQ(t.render({{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.render({{"user", "Hi"}}, true, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // An earlier answer keeps its text, not its thinking.
  EXPECT_EQ(t.render({{"user", "Hi"}, {"assistant", "<think>\nhmm\n</think>\n\nHello!"}, {"user", "Bye"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  // Templates without a thinking block are untouched by the switch.
  EXPECT_FALSE(ChatTemplate::detect(kQwen25).thinks());
  EXPECT_EQ(ChatTemplate::detect("chatml").render({{"user", "Hi"}}, true, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// gpt-oss's harmony format as its template (openai/gpt-oss-20b
// chat_template.jinja) renders a conversation without tools: the system
// message with today's date, the first system message as the developer's
// instructions, earlier answers on the final channel, and an open
// assistant message.
TEST(ChatTemplate, GptOssRendersHarmony) {
  const ChatTemplate t = ChatTemplate::detect(
      "{{- \"<|start|>system<|message|>\" }}{{- \"<|start|>assistant<|channel|>final<|message|>\" + message.content + "
      "\"<|end|>\" }}");
  EXPECT_EQ(t.format(), ChatFormat::Harmony);
  EXPECT_STREQ(t.name(), "gpt-oss");
  EXPECT_TRUE(t.thinks());
  char date[16];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(date, sizeof(date), "%Y-%m-%d", &local);
  const std::string system = std::string("<|start|>system<|message|>You are ChatGPT, a large language model trained by "
                                         "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ") +
                             date +
                             "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must "
                             "be included for every message.<|end|>";
  EXPECT_EQ(t.render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}}, true),
            system + "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
                     "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|end|>"
                     "<|start|>user<|message|>Bye<|end|><|start|>assistant");
  EXPECT_EQ(t.render({{"user", "Hi"}, {"assistant", "Hello."}}, false),
            system + "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|return|>");
  EXPECT_EQ(t.stop_strings(), (std::vector<std::string>{"<|return|>", "<|call|>"}));
}

// The variants the cases above do not reach, by llama.cpp's names: the
// built-in formats are Jinja sources reading each variant's flags
// (tokenizer/builtin_chat_formats.cpp), and whitespace stays as written.
TEST(ChatTemplate, BuiltInVariantsKeepTheirSpacing) {
  const std::vector<ChatMessage> turns = {
      {"system", " Sys text \n"}, {"user", "  Hello  "}, {"assistant", " Reply one \n"}, {"user", "Two"}};
  EXPECT_EQ(ChatTemplate::detect("llama2").render(turns, true),
            "[INST]  Sys text \n\n  Hello   [/INST] Reply one \n</s>[INST] Two [/INST]");
  EXPECT_EQ(ChatTemplate::detect("llama2-sys").render(turns, true),
            "[INST] <<SYS>>\n Sys text \n\n<</SYS>>\n\n  Hello   [/INST] Reply one \n</s>[INST] Two [/INST]");
  EXPECT_EQ(ChatTemplate::detect("mistral-v7-tekken").render(turns, true),
            "[SYSTEM_PROMPT] Sys text \n[/SYSTEM_PROMPT][INST]  Hello  [/INST] Reply one \n</s>[INST]Two[/INST]");
}

TEST(ChatTemplate, AcceptsLlamaCppTemplateNames) {
  EXPECT_EQ(ChatTemplate::detect("llama3").format(), ChatFormat::Llama3);
  EXPECT_EQ(ChatTemplate::detect("gemma").format(), ChatFormat::Gemma);
  const ChatTemplate tekken = ChatTemplate::detect("mistral-v7-tekken");
  EXPECT_EQ(tekken.format(), ChatFormat::MistralV7);
  EXPECT_FALSE(tekken.fell_back());
  EXPECT_EQ(tekken.render({{"system", "S"}, {"user", "U"}}, true),
            "[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][INST]U[/INST]");
}

TEST(ChatTemplate, GenerationPromptIsOptional) {
  const ChatTemplate t = ChatTemplate::detect(kChatML);
  EXPECT_EQ(t.render({{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(ChatTemplate::detect(kLlama3).render({{"user", " Hi "}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, RejectsUnknownRole) {
  const ChatTemplate t = ChatTemplate::detect(kChatML);
  EXPECT_THROW(t.render({{"user", "Hi"}, {"tool", "42"}}, true), Error);
  EXPECT_THROW(t.render({{"", "Hi"}}, true), Error);
}

TEST(ChatTemplate, StopStringsEndTheAssistantTurn) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ChatTemplate::detect(kChatML).stop_strings(), V{"<|im_end|>"});
  EXPECT_EQ(ChatTemplate::detect(kLlama3).stop_strings(), V{"<|eot_id|>"});
  EXPECT_EQ(ChatTemplate::detect(kGemma).stop_strings(), V{"<end_of_turn>"});
  EXPECT_EQ(ChatTemplate::detect(kPhi3).stop_strings(), V{"<|end|>"});
  EXPECT_EQ(ChatTemplate::detect(kZephyr).stop_strings(), V{"</s>"});
  EXPECT_EQ(ChatTemplate::detect(kMistralV7).stop_strings(), V{"</s>"});
}

}  // namespace
}  // namespace shoal
