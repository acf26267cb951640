#pragma once
// What an embedding request pools (engine/generator.h, GenerationOptions).

namespace shoal {

// How an embedding request pools its prompt's rows (after the output norm):
// None asks for generation instead. GGUF's {arch}.pooling_type: 1 mean,
// 2 cls (the first token), 3 last; a causal LM without one pools its last
// token, as llama-server does. Rank (4): a reranker's last row as it is,
// not scaled to unit length, for its ranking head (engine/rank_head.h).
enum class Pooling { None, Mean, Cls, Last, Rank };

}  // namespace shoal
