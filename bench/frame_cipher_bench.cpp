// What sealing costs per frame (wire/frame_cipher.h): seal + open of one
// payload, for a decode step's activations (one token of a 576-wide model, in
// f32) up to a weight chunk (8 MiB).
#include <benchmark/benchmark.h>

#include <vector>

#include "cluster/wire/frame_cipher.h"

namespace {

void BM_SealOpen(benchmark::State& state) {
  const uint8_t k1[shoal::wire::kKeyBytes] = {1}, k2[shoal::wire::kKeyBytes] = {2};
  shoal::wire::FrameCipher a(k1, k2), b(k2, k1);
  uint8_t header[shoal::wire::kHeaderBytes] = {};
  std::vector<uint8_t> payload(static_cast<size_t>(state.range(0)), 7), sealed;
  const std::span<const uint8_t> part(payload);
  for (auto _ : state) {
    a.seal(header, std::span(&part, 1), sealed);
    if (!b.open(header, sealed)) state.SkipWithError("tag did not verify");
    benchmark::DoNotOptimize(sealed.data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SealOpen)->Arg(576 * 4)->Arg(576 * 4 * 64)->Arg(8 << 20);

}  // namespace

BENCHMARK_MAIN();
