// shoal run: one prompt, text to stdout (prompt echoed unless --no-echo, as
// llama.cpp's completion tool does), everything else to stderr.
#include <cstdio>
#include <memory>

#include "cli/common_options.h"
#include "cli/option_range.h"
#include "engine/stage_report.h"
#include "engine/generator.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar_matcher.h"
#include "server/json_schema_grammar.h"
#include "util/error.h"
#include "util/log.h"
#include "util/text_file.h"

#include <fmt/ranges.h>

namespace shoal::cli {
namespace {

struct RunOptions {
  CommonOptions common;
  std::string prompt;
  std::string prompt_file;
  std::string system;
  int n_predict = 128;
  bool no_echo = false;
  bool chat = false;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::string logits_out;
  std::string grammar, grammar_file, json_schema, json_schema_file;
};

// --grammar / --grammar-file (GBNF) or --json-schema / --json-schema-file,
// as llama.cpp's tools take them: the output is held to it.
std::shared_ptr<const grammar::Grammar> output_grammar(const RunOptions& o) {
  const int given = !o.grammar.empty() + !o.grammar_file.empty() + !o.json_schema.empty() + !o.json_schema_file.empty();
  if (given == 0) return nullptr;
  if (given > 1) fail("give one of --grammar, --grammar-file, --json-schema and --json-schema-file");
  std::string gbnf = !o.grammar_file.empty() ? read_text_file(o.grammar_file, "grammar") : o.grammar;
  if (!o.json_schema.empty() || !o.json_schema_file.empty()) {
    const std::string text = o.json_schema.empty() ? read_text_file(o.json_schema_file, "JSON schema") : o.json_schema;
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("the JSON schema is not JSON: {}", e.what());
    }
    gbnf = server::json_schema_gbnf(schema);
  }
  auto g = std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf));
  grammar::GrammarMatcher start(g);  // a grammar that cannot start fails here, not mid-run
  return g;
}

int run(RunOptions& o) {
  set_verbosity(o.common.verbosity);
  if (!o.prompt_file.empty()) o.prompt = read_text_file(o.prompt_file, "prompt");
  Engine engine(o.common.engine, stage_builder(o.common));
  const Tokenizer& tok = engine.tokenizer();
  GenerationOptions gen;
  gen.max_tokens = o.n_predict;
  gen.sampling = o.common.sampling;
  gen.stop = o.stop;
  gen.ignore_eos = o.ignore_eos;
  gen.grammar = output_grammar(o);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> logits_file(nullptr, std::fclose);
  if (!o.logits_out.empty()) {
    logits_file.reset(std::fopen(o.logits_out.c_str(), "wb"));
    if (!logits_file) fail("cannot write {}", o.logits_out);
    gen.on_logits = [&](const float* logits, int n_vocab) {
      if (std::fwrite(logits, sizeof(float), n_vocab, logits_file.get()) != static_cast<size_t>(n_vocab))
        fail("cannot write {}", o.logits_out);
    };
  }

  std::string text = o.prompt;
  if (o.chat) {
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    text = engine.chat_template().render(messages, true, o.common.engine.reasoning);
    for (auto& s : engine.chat_template().stop_strings()) gen.stop.push_back(s);
  }
  // Chat markup is made of special tokens; a plain prompt is taken as text,
  // but llama.cpp's completion tool parses special tokens there too.
  std::vector<TokenId> prompt = tok.encode(text, true, true);
  spdlog::debug("prompt tokens: [{}]", fmt::join(prompt, ", "));
  if (!o.no_echo && !o.chat) {
    std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
    std::fflush(stdout);
  }
  Generator generator(engine.pipeline(), tok, engine.n_ctx());
  if (Drafter* d = engine.drafter()) generator.set_drafter(d, engine.options().speculative);
  generator.set_recovery([&engine](const std::exception& e, const Pipeline::KeepPositions& keep) {
    return engine.rebuild_stages(&e, keep).has_value();
  });
  GenerationResult r = generator.generate(prompt, gen, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);  // all of it: a piece may hold a NUL byte
    std::fflush(stdout);
    return true;
  });
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const double n_gen = static_cast<double>(r.tokens.size());
  std::fprintf(stderr, "prompt: %d tokens in %.3f s (%.2f tok/s); generation: %zu tokens in %.3f s (%.2f tok/s); finish: %s\n",
               r.n_prompt, r.prompt_seconds, r.n_prompt / std::max(r.prompt_seconds, 1e-9), r.tokens.size(),
               r.generation_seconds, n_gen / std::max(r.generation_seconds, 1e-9), r.finish_reason.c_str());
  if (r.drafted > 0)
    std::fprintf(stderr, "speculative: %d of %d guessed tokens accepted (%.1f %%), %.2f tokens per step\n", r.accepted,
                 r.drafted, 100.0 * r.accepted / r.drafted,
                 n_gen / std::max(1.0, n_gen - r.accepted));
  if (const PromptStages::Moves moves = engine.pipeline().cache_moves(); moves.sequences > 0)
    std::fprintf(stderr,
                 "prompts on their own stages: %llu cache%s moved to the decode stages (%.2f MiB in %.3f s; %llu "
                 "layer%s kept on the machine that holds them in both)\n",
                 static_cast<unsigned long long>(moves.sequences), moves.sequences == 1 ? "" : "s",
                 moves.bytes / 1048576.0, moves.seconds, static_cast<unsigned long long>(moves.kept_layers),
                 moves.kept_layers == 1 ? "" : "s");
  // -v on a cluster: the plan's prediction per stage beside what the steps took.
  if (o.common.verbosity >= 1 && engine.supervisor())
    std::fprintf(stderr, "%s", format_stage_reports(stage_reports(engine),
                                                    engine.supervisor()->status().predicted_token_ms).c_str());
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "generate text from one prompt");
  add_engine_options(*cmd, o->common);
  add_sampling_options(*cmd, o->common);
  add_cluster_options(*cmd, o->common);
  add_speculative_options(*cmd, o->common);
  cmd->add_option("-p,--prompt", o->prompt, "prompt text");
  cmd->add_option("-f,--file", o->prompt_file, "read the prompt from a file");
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate (-1: until the end)")
      ->capture_default_str()
      ->check(whole_number_in(-1, INT32_MAX));
  cmd->add_flag("--no-echo", o->no_echo, "do not print the prompt");
  cmd->add_flag("--chat", o->chat, "wrap the prompt as one user turn in the model's chat template");
  cmd->add_option("--system", o->system, "system message for --chat");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-generation tokens");
  cmd->add_option("--stop", o->stop, "stop string (repeatable)");
  cmd->add_option("--grammar", o->grammar, "hold the output to this GBNF grammar (llama.cpp's format)");
  cmd->add_option("--grammar-file", o->grammar_file, "hold the output to the GBNF grammar in this file");
  cmd->add_option("-j,--json-schema", o->json_schema, "hold the output to JSON valid for this JSON schema");
  cmd->add_option("--json-schema-file", o->json_schema_file, "hold the output to the JSON schema in this file");
  cmd->add_option("--logits-out", o->logits_out, "write each step's logits (raw f32, n_vocab per token) to a file");
  return [o] { return run(*o); };
}

}  // namespace shoal::cli
