// What one passphrase guess costs (wire/cluster_key.h): a single Argon2id
// derivation with the fixed parameters, which a listener testing guesses
// against a beacon or a handshake proof must pay per guess. The figure goes
// into docs/protocol.md, "Cluster keys".
#include <benchmark/benchmark.h>

#include "cluster/wire/cluster_key.h"

namespace {

void BM_DerivePassphrase(benchmark::State& state) {
  const std::string passphrase = "correct horse battery staple";
  for (auto _ : state) benchmark::DoNotOptimize(shoal::wire::derive_cluster_key(passphrase));
}
BENCHMARK(BM_DerivePassphrase)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
