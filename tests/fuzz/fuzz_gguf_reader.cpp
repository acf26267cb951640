// libFuzzer target: the GGUF reader must parse or throw shoal::Error on any
// input, never crash. Build with -DSHOAL_FUZZ=ON (clang), run:
//   build-fuzz/fuzz_gguf_reader -max_total_time=60 corpus/
#include <cstddef>
#include <cstdint>

#include "gguf/reader.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = shoal::gguf::File::parse(data, size, "fuzz.gguf");
    for (const auto& [key, value] : file->metadata()) (void)value.to_display();
  } catch (const shoal::Error&) {
  }
  return 0;
}
