// What one whole-vocabulary grammar mask costs (GrammarMatcher::allowed_tokens
// over the tokenizer's piece trie), the step a constrained decode pays when
// the model's own pick is refused: at a place where JSON allows few bytes
// (after "{") and inside a string (almost every token goes). Qwen2.5's
// 151k-token vocabulary from the models cache (scripts/fetch-models).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>

#include "gguf/reader.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar_matcher.h"
#include "server/json_schema_grammar.h"
#include "tokenizer/tokenizer.h"

namespace {

// Any JSON object, as response_format json_object asks for it: the rules
// the server itself writes.
std::string json_object_gbnf() { return shoal::server::json_schema_gbnf(nlohmann::ordered_json{{"type", "object"}}); }

const shoal::Tokenizer& qwen() {
  static std::unique_ptr<shoal::gguf::File> file;
  static std::unique_ptr<shoal::Tokenizer> tok;
  if (!tok) {
    const char* home = std::getenv("HOME");
    file = shoal::gguf::File::open(std::string(home ? home : "/root") +
                                   "/.cache/shoal/models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf");
    tok = shoal::Tokenizer::from_gguf(*file);
    tok->piece_trie();
  }
  return *tok;
}

void mask_after(benchmark::State& state, const char* prefix) {
  const shoal::Tokenizer& tok = qwen();
  shoal::grammar::GrammarMatcher m(std::make_shared<const shoal::grammar::Grammar>(shoal::grammar::parse_gbnf(json_object_gbnf())));
  if (!m.accept(prefix)) state.SkipWithError("prefix refused");
  std::vector<uint8_t> allowed(static_cast<size_t>(tok.n_vocab()));
  size_t n = 0;
  for (auto _ : state) {
    std::fill(allowed.begin(), allowed.end(), 0);
    m.allowed_tokens(tok.piece_trie(), allowed);
    n = static_cast<size_t>(std::count(allowed.begin(), allowed.end(), 1));
  }
  state.counters["allowed"] = static_cast<double>(n);
  state.counters["trie_nodes"] = static_cast<double>(tok.piece_trie().size());
}

void BM_MaskAfterBrace(benchmark::State& state) { mask_after(state, "{"); }
void BM_MaskInString(benchmark::State& state) { mask_after(state, "{\"name\": \"Ada"); }
BENCHMARK(BM_MaskAfterBrace)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaskInString)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
