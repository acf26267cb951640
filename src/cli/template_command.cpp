// shoal template: a conversation rendered through a chat template, printed to
// stdout exactly (nothing else goes there), as llama-server's /apply-template.
#include <cstdio>

#include "cli/commands.h"
#include "gguf/reader.h"
#include "tokenizer/jinja_chat.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/text_file.h"

namespace shoal::cli {
namespace {

nlohmann::ordered_json read_json(const std::string& path, const char* what) {
  auto j = nlohmann::ordered_json::parse(read_text_file(path), nullptr, false);
  if (j.is_discarded()) fail("{}: not valid JSON ({})", path, what);
  return j;
}

}  // namespace

Command add_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("template", "print a conversation rendered through a chat template");
  struct Options {
    std::string model, template_file, messages, tools, kwargs;
    bool no_generation_prompt = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("-m,--model", o->model, "GGUF file: its chat template and special tokens");
  cmd->add_option("--chat-template-file", o->template_file, "a Jinja template file (instead of the model's)");
  cmd->add_option("--messages", o->messages, "JSON file: an array of OpenAI chat messages")->required();
  cmd->add_option("--tools", o->tools, "JSON file: an array of OpenAI tool objects");
  cmd->add_option("--chat-template-kwargs", o->kwargs, "JSON object of extra template variables, e.g. "
                                                       "'{\"enable_thinking\": false}'");
  cmd->add_flag("--no-generation-prompt", o->no_generation_prompt, "do not open the assistant's turn");
  return [o] {
    if (o->model.empty() && o->template_file.empty()) fail("give -m MODEL, --chat-template-file FILE, or both");
    std::string source, bos, eos;
    if (!o->model.empty()) {
      auto file = gguf::File::open(o->model);
      auto tokenizer = Tokenizer::from_gguf(*file);
      if (tokenizer->bos() >= 0) bos = tokenizer->token_text(tokenizer->bos());
      if (tokenizer->eos() >= 0) eos = tokenizer->token_text(tokenizer->eos());
      source = file->get_string("tokenizer.chat_template", "");
      if (source.empty() && o->template_file.empty())
        fail("{} has no chat template (tokenizer.chat_template): give --chat-template-file", o->model);
    }
    if (!o->template_file.empty()) source = read_text_file(o->template_file);
    ChatRenderRequest request;
    request.messages = read_json(o->messages, "an array of messages");
    if (!request.messages.is_array()) fail("{}: expected a JSON array of messages", o->messages);
    if (!o->tools.empty()) {
      request.tools = read_json(o->tools, "an array of tools");
      if (!request.tools.is_array()) fail("{}: expected a JSON array of tools", o->tools);
    }
    if (!o->kwargs.empty()) {
      request.kwargs = nlohmann::ordered_json::parse(o->kwargs, nullptr, false);
      if (!request.kwargs.is_object()) fail("--chat-template-kwargs: expected a JSON object");
    }
    request.add_generation_prompt = !o->no_generation_prompt;
    std::string prompt = JinjaChat(source, bos, eos).render(request);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    return 0;
  };
}

}  // namespace shoal::cli
