// shoal chat: an interactive conversation in the terminal, rendered with the
// model's chat template; each turn re-reads only what is new.
#include <cstdio>
#include <iostream>

#include "cli/common_options.h"
#include "cli/option_range.h"
#include "engine/generator.h"
#include "util/log.h"

namespace shoal::cli {
namespace {

struct ChatOptions {
  CommonOptions common;
  std::string system;
  int n_predict = -1;
};

int chat(ChatOptions& o) {
  set_verbosity(o.common.verbosity);
  Engine engine(o.common.engine, stage_builder(o.common));
  const ChatTemplate& tmpl = engine.chat_template();
  tmpl.require_known();
  GenerationOptions gen;
  gen.max_tokens = o.n_predict;
  gen.sampling = o.common.sampling;
  gen.stop = tmpl.stop_strings();
  Generator generator(engine.pipeline(), engine.tokenizer(), engine.n_ctx());
  if (Drafter* d = engine.drafter()) generator.set_drafter(d, engine.options().speculative);
  generator.set_recovery([&engine](const std::exception& e, const Pipeline::KeepPositions& keep) {
    return engine.rebuild_stages(&e, keep).has_value();
  });
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  std::fprintf(stderr, "chatting with %s (%s template); empty line or Ctrl-D ends\n", engine.config().name.c_str(),
               tmpl.name());
  std::string line;
  for (;;) {
    std::fputs("> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line.empty() || line == "/exit") break;
    messages.push_back({"user", line});
    auto prompt = engine.tokenizer().encode(tmpl.render(messages, true, o.common.engine.reasoning), true, true);
    std::string answer;
    generator.generate(prompt, gen, [&](const std::string& piece) {
      answer += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);  // all of it: a piece may hold a NUL byte
      std::fflush(stdout);
      return true;
    });
    std::fputs("\n", stdout);
    messages.push_back({"assistant", answer});
  }
  return 0;
}

}  // namespace

Command add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  auto* cmd = app.add_subcommand("chat", "interactive chat in the terminal");
  add_engine_options(*cmd, o->common);
  add_sampling_options(*cmd, o->common);
  add_cluster_options(*cmd, o->common);
  add_speculative_options(*cmd, o->common);
  cmd->add_option("--system", o->system, "system message");
  cmd->add_option("-n,--n-predict", o->n_predict, "most tokens per answer (-1: until the end)")
      ->check(whole_number_in(-1, INT32_MAX));
  return [o] { return chat(*o); };
}

}  // namespace shoal::cli
