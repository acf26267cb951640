#include "cluster/worker/local_models.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include <spdlog/spdlog.h>

#include "gguf/reader.h"
#include "util/error.h"

namespace shoal {
namespace fs = std::filesystem;

struct LocalModels::Impl {
  // One tensor of one file that could be asked for. Its hash is computed the
  // first time a request with its type and shape comes, then kept: hashing
  // every tensor of every file up front would read whole models that may
  // never be used.
  struct Candidate {
    size_t file = 0;
    size_t tensor = 0;
    bool hashed = false;
    ContentHash hash;
  };
  using Key = std::pair<DType, std::vector<int64_t>>;

  std::vector<std::shared_ptr<const gguf::File>> files;  // open (mapped) for the worker's lifetime
  std::map<Key, std::vector<Candidate>> by_shape;         // built once; only `hashed`/`hash` change
  std::mutex mu;                                          // guards `hashed`/`hash`

  TensorBytes bytes_of(const Candidate& c) const {
    const gguf::TensorInfo& t = files[c.file]->tensors()[c.tensor];
    // The keepalive holds the whole File: its mapping is what `data` points into.
    return TensorBytes{t.data, t.bytes, files[c.file]};
  }
};

LocalModels::LocalModels(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("models dir {} is not a directory", dir);
  std::vector<std::string> paths;
  for (const fs::directory_entry& de : fs::directory_iterator(dir, ec)) {
    // is_regular_file follows symlinks: a link to a model elsewhere counts.
    if (de.path().extension() == ".gguf" && de.is_regular_file(ec)) paths.push_back(de.path().string());
  }
  if (ec) fail("cannot read models dir {}: {}", dir, ec.message());
  std::sort(paths.begin(), paths.end());  // a stable order: the first match wins

  for (const std::string& path : paths) {
    std::shared_ptr<const gguf::File> file;
    try {
      file = gguf::File::open(path);
    } catch (const std::exception& e) {
      spdlog::warn("models dir: skipping {}: {}", path, e.what());
      continue;
    }
    size_t fi = impl_->files.size();
    const auto& tensors = file->tensors();
    for (size_t ti = 0; ti < tensors.size(); ++ti)
      impl_->by_shape[{tensors[ti].type, tensors[ti].shape}].push_back(Impl::Candidate{fi, ti, false, {}});
    spdlog::debug("models dir: {} ({} tensors)", path, tensors.size());
    impl_->files.push_back(std::move(file));
  }
}

LocalModels::~LocalModels() = default;

TensorBytes LocalModels::find(DType type, const std::vector<int64_t>& shape, const ContentHash& hash) {
  std::vector<Impl::Candidate*> unhashed;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->by_shape.find({type, shape});
    if (it == impl_->by_shape.end()) return {};
    // Hashes already known answer first, without reading any tensor.
    for (Impl::Candidate& c : it->second) {
      if (!c.hashed) unhashed.push_back(&c);
      else if (c.hash == hash) return impl_->bytes_of(c);
    }
  }
  // Hash outside the lock: a large tensor read from disk for the first time
  // takes a while, and other loads should not wait behind it. Two threads
  // may hash the same tensor at once; both get the same answer.
  // (Candidate addresses are stable: by_shape is never modified after
  // construction except for these two fields.)
  for (Impl::Candidate* c : unhashed) {
    const gguf::TensorInfo& t = impl_->files[c->file]->tensors()[c->tensor];
    ContentHash h = hash_bytes(t.data, t.bytes);
    {
      std::lock_guard lock(impl_->mu);
      c->hash = h;
      c->hashed = true;
    }
    if (h == hash) return impl_->bytes_of(*c);
  }
  return {};
}

std::vector<std::string> LocalModels::files() const {
  std::vector<std::string> out;
  for (const auto& f : impl_->files) out.push_back(f->path());
  return out;
}

}  // namespace shoal
