#include "cluster/worker/weight_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <list>
#include <map>
#include <mutex>
#include <vector>

#include <spdlog/spdlog.h>

#include "util/error.h"
#include "util/mapped_file.h"

namespace shoal {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTempPrefix = ".tmp-";
// A temp file older than this was left by a crashed writer; younger ones may
// belong to another process putting into the same dir right now.
constexpr int64_t kStaleTempNs = 3600LL * 1000 * 1000 * 1000;

// An entry is "<SHA-256 hex>.bin" (64 digits).
constexpr size_t kHexDigits = 64;

bool is_hex_bin(const std::string& name, size_t digits) {
  return name.size() == digits + 4 && name.compare(digits, 4, ".bin") == 0 &&
         name.find_first_not_of("0123456789abcdef") == digits;
}

bool is_entry_name(const std::string& name) { return is_hex_bin(name, kHexDigits); }

// Before protocol v7 entries were named by XXH3-128 (32 digits). Such a name
// proves nothing about the bytes, and no request names one any more: they
// are deleted, never read, so their space comes back.
bool is_legacy_entry_name(const std::string& name) { return is_hex_bin(name, 32); }

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Sets a file's mtime (its last use, as the cache sees it). Failure only
// costs LRU accuracy after a restart, so it is not an error.
void set_mtime(const std::string& path, int64_t stamp) {
  timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;  // leave atime alone
  times[1].tv_sec = static_cast<time_t>(stamp / 1000000000);
  times[1].tv_nsec = static_cast<long>(stamp % 1000000000);
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0)
    spdlog::debug("weight cache: cannot set the time of {}: {}", path, std::strerror(errno));
}

void write_file(const std::string& path, const void* data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("weight cache: cannot create {}: {}", path, std::strerror(errno));
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(path.c_str());
      fail("weight cache: cannot write {} ({} of {} bytes written): {}", path, done, size, std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  // No fsync: after a power loss an entry may come back short (the size
  // check drops it) or with wrong bytes (the caller's hash check catches it
  // and calls remove()). A process crash cannot tear it thanks to rename.
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(path.c_str());
    fail("weight cache: cannot write {}: {}", path, std::strerror(e));
  }
}

}  // namespace

struct WeightCache::Impl {
  struct Entry {
    uint64_t size = 0;
    std::list<ContentHash>::iterator lru;  // position in `lru`
  };

  std::string dir;
  uint64_t max_bytes = 0;
  mutable std::mutex mu;
  std::map<ContentHash, Entry> index;
  std::list<ContentHash> lru;  // front = most recently used
  uint64_t total = 0;
  // Last-use stamps are mtimes, made strictly increasing so that two uses in
  // the same clock tick (coarse kernel timestamps) still order after a restart.
  int64_t last_stamp = 0;
  uint64_t temp_counter = 0;

  std::string path(const ContentHash& h) const { return dir + "/" + h.hex() + ".bin"; }

  int64_t next_stamp() {
    last_stamp = std::max(now_ns(), last_stamp + 1);
    return last_stamp;
  }

  void touch(const ContentHash& h, Entry& e) {
    set_mtime(path(h), next_stamp());
    lru.splice(lru.begin(), lru, e.lru);
  }

  void insert(const ContentHash& h, uint64_t size) {
    lru.push_front(h);
    index[h] = Entry{size, lru.begin()};
    total += size;
  }

  // Forgets an entry and deletes its file. A mapping of it that a caller
  // still holds stays valid: unlink only removes the name.
  void drop(std::map<ContentHash, Entry>::iterator it) {
    std::string p = path(it->first);
    if (::unlink(p.c_str()) != 0 && errno != ENOENT)
      spdlog::warn("weight cache: cannot delete {}: {}", p, std::strerror(errno));
    total -= it->second.size;
    lru.erase(it->second.lru);
    index.erase(it);
  }

  void evict_to(uint64_t limit) {
    while (total > limit && !lru.empty()) {
      auto it = index.find(lru.back());
      spdlog::debug("weight cache: evicting {} ({} bytes)", it->first.hex(), it->second.size);
      drop(it);
    }
  }

  void scan() {
    struct Found {
      ContentHash hash;
      uint64_t size;
      int64_t stamp;
    };
    std::vector<Found> found;
    std::error_code ec;
    int64_t now = now_ns();
    for (const fs::directory_entry& de : fs::directory_iterator(dir, ec)) {
      std::string name = de.path().filename().string();
      std::string p = de.path().string();
      struct stat st {};
      if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // stray dirs, symlinks
      if (name.rfind(kTempPrefix, 0) == 0) {
        if (now - mtime_ns(st) > kStaleTempNs) ::unlink(p.c_str());
        continue;
      }
      if (is_legacy_entry_name(name)) {
        spdlog::info("weight cache: deleting {}, named by the hash of an older version", p);
        ::unlink(p.c_str());
        continue;
      }
      if (!is_entry_name(name)) continue;  // not ours: leave it alone
      found.push_back(
          {ContentHash::from_hex(name.substr(0, kHexDigits)), static_cast<uint64_t>(st.st_size), mtime_ns(st)});
    }
    if (ec) fail("weight cache: cannot read {}: {}", dir, ec.message());
    // Oldest first, so that each push_front leaves the newest at the front.
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      return a.stamp != b.stamp ? a.stamp < b.stamp : a.hash < b.hash;
    });
    for (const Found& f : found) {
      insert(f.hash, f.size);
      last_stamp = std::max(last_stamp, f.stamp);
    }
  }
};

WeightCache::WeightCache(std::string dir, uint64_t max_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->dir = std::move(dir);
  impl_->max_bytes = max_bytes;
  if (max_bytes == 0) return;  // no cache: leave the disk alone
  std::error_code ec;
  fs::create_directories(impl_->dir, ec);
  if (ec || !fs::is_directory(impl_->dir))
    fail("weight cache: cannot create directory {}: {}", impl_->dir, ec ? ec.message() : "not a directory");
  impl_->scan();
  // --cache-max may have shrunk since the last run.
  impl_->evict_to(max_bytes);
  spdlog::debug("weight cache {}: {} entries, {} bytes", impl_->dir, impl_->index.size(), impl_->total);
}

WeightCache::~WeightCache() = default;

TensorBytes WeightCache::find(const ContentHash& hash, size_t expected_size) {
  // find() checks only the size. Whether the bytes still hash to `hash` is
  // the caller's check: the protocol has the worker verify every tensor's
  // hash before use, whatever its source, so hashing here would do it twice.
  std::lock_guard lock(impl_->mu);
  auto it = impl_->index.find(hash);
  if (it == impl_->index.end()) return {};
  std::string p = impl_->path(hash);
  if (it->second.size != expected_size) {
    spdlog::warn("weight cache: {} holds {} bytes, expected {}; deleting it", p, it->second.size, expected_size);
    impl_->drop(it);
    return {};
  }
  std::shared_ptr<MappedFile> map;
  try {
    map = std::make_shared<MappedFile>(p);
  } catch (const Error& e) {
    spdlog::warn("weight cache: {}; forgetting the entry", e.what());
    impl_->drop(it);
    return {};
  }
  // The index size is from when the entry was made or scanned; the file
  // may have changed behind our back since.
  if (map->size() != expected_size || map->data() == nullptr) {
    spdlog::warn("weight cache: {} holds {} bytes, expected {}; deleting it", p, map->size(), expected_size);
    impl_->drop(it);
    return {};
  }
  impl_->touch(hash, it->second);
  const uint8_t* data = map->data();
  return TensorBytes{data, expected_size, std::move(map)};
}

void WeightCache::put(const ContentHash& hash, const void* data, size_t size) {
  if (impl_->max_bytes == 0 || size == 0 || size > impl_->max_bytes) return;
  std::string temp;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->index.find(hash);
    if (it != impl_->index.end()) {
      if (it->second.size == size) {
        impl_->touch(hash, it->second);
        return;
      }
      impl_->drop(it);  // same hash, other size: the old file is wrong
    }
    // Make room before writing, so that a full disk gets space back first.
    impl_->evict_to(impl_->max_bytes - size);
    temp = fmt::format("{}/{}{}-{}-{}", impl_->dir, kTempPrefix, hash.hex(), ::getpid(), impl_->temp_counter++);
  }
  // The write runs unlocked: a tensor can be hundreds of MB, and other
  // threads' finds should not wait for it.
  write_file(temp, data, size);

  std::lock_guard lock(impl_->mu);
  std::string final_path = impl_->path(hash);
  if (::rename(temp.c_str(), final_path.c_str()) != 0) {
    int e = errno;
    ::unlink(temp.c_str());
    fail("weight cache: cannot rename {} to {}: {}", temp, final_path, std::strerror(e));
  }
  // Another thread may have put the same hash meanwhile; rename replaced its
  // file with identical bytes (mappings of the old one stay valid).
  auto it = impl_->index.find(hash);
  if (it != impl_->index.end()) {
    impl_->total -= it->second.size;
    it->second.size = size;
    impl_->total += size;
    impl_->touch(hash, it->second);
  } else {
    impl_->insert(hash, size);
    set_mtime(final_path, impl_->next_stamp());
  }
  // Concurrent puts can overshoot; the new entry is at the front and fits
  // alone, so this never evicts it.
  impl_->evict_to(impl_->max_bytes);
}

void WeightCache::remove(const ContentHash& hash) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->index.find(hash);
  if (it != impl_->index.end()) impl_->drop(it);
}

uint64_t WeightCache::bytes() const {
  std::lock_guard lock(impl_->mu);
  return impl_->total;
}

uint64_t WeightCache::max_bytes() const { return impl_->max_bytes; }

size_t WeightCache::entries() const {
  std::lock_guard lock(impl_->mu);
  return impl_->index.size();
}

const std::string& WeightCache::dir() const { return impl_->dir; }

}  // namespace shoal
