// shoal keygen: a fresh cluster key for --key-file, to stdout or to a new
// file only its owner can read.
#include <fcntl.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "cluster/wire/cluster_key.h"
#include "util/error.h"

namespace shoal::cli {
namespace {

void write_new_file(const std::string& path, const std::string& text) {
  // O_EXCL: a key already in use is never replaced by accident.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) fail("{} exists: shoal keygen does not overwrite a key (remove it first)", path);
  if (fd < 0) fail("cannot create {}: {}", path, std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      ::unlink(path.c_str());
      fail("cannot write {}: {}", path, std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail("cannot write {}: {}", path, std::strerror(errno));
}

}  // namespace

Command add_keygen_command(CLI::App& app) {
  auto output = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("keygen", "print a fresh cluster key (32 random bytes as hex) for --key-file");
  cmd->add_option("-o,--output", *output, "write it to this new file (mode 0600) instead of stdout");
  return [output] {
    // Built in place, never copied, so the one buffer can be wiped.
    std::string line(65, '\n');
    struct Wipe {
      std::string& s;
      ~Wipe() { OPENSSL_cleanse(s.data(), s.size()); }
    } wipe{line};
    {
      std::string key = wire::generate_cluster_key();
      line.replace(0, key.size(), key);
      OPENSSL_cleanse(key.data(), key.size());
    }
    if (!output->empty()) {
      write_new_file(*output, line);
    } else if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size() || std::fflush(stdout) != 0) {
      fail("cannot write the key to stdout");
    }
    return 0;
  };
}

}  // namespace shoal::cli
