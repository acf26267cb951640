// shoal inspect: GGUF metadata and a tensor summary, like gguf-dump.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "gguf/reader.h"

namespace shoal::cli {

Command add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "print a GGUF file's metadata and tensors");
  auto path = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("model,-m,--model", *path, "GGUF file")->required();
  cmd->add_flag("--tensors", *all, "list every tensor");
  return [path, all] {
    auto file = gguf::File::open(*path);
    std::printf("file: %s\nGGUF version %u, %zu bytes, alignment %lu\n", path->c_str(), file->version(),
                file->file_size(), static_cast<unsigned long>(file->alignment()));
    std::printf("\nmetadata (%zu keys):\n", file->metadata().size());
    for (const auto& [key, value] : file->metadata())
      std::printf("  %-44s %s\n", key.c_str(), value.to_display().c_str());
    std::map<std::string, std::pair<size_t, size_t>> by_type;  // type -> (count, bytes)
    int64_t n_params = 0;
    for (const auto& t : file->tensors()) {
      auto& [count, bytes] = by_type[std::string(dtype_info(t.type).name)];
      ++count;
      bytes += t.bytes;
      n_params += t.n_elements();
    }
    std::printf("\ntensors: %zu, %.2f M parameters\n", file->tensors().size(), n_params / 1e6);
    for (const auto& [type, cb] : by_type)
      std::printf("  %-6s %5zu tensors %10.2f MiB\n", type.c_str(), cb.first, cb.second / 1048576.0);
    if (*all) {
      for (const auto& t : file->tensors()) {
        std::string shape;
        for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.shape[i]);
        std::printf("  %-36s %-6s %-20s %10zu bytes\n", t.name.c_str(), std::string(dtype_info(t.type).name).c_str(),
                    shape.c_str(), t.bytes);
      }
    }
    return 0;
  };
}

}  // namespace shoal::cli
