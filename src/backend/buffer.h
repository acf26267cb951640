#pragma once
// Memory a backend owns (host memory on the CPU, device memory on a GPU) and
// a place inside it. Model code never reads a Buffer directly: it hands
// DevicePtrs to the backend's ops, uploads and downloads.
#include <cstddef>
#include <cstdint>

namespace shoal {

class Buffer {
 public:
  explicit Buffer(size_t bytes) : bytes_(bytes) {}
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
};

// A byte offset into a Buffer. Arithmetic counts floats, as a float* would,
// because activations are f32 rows; bytes() counts bytes (KV rows).
struct DevicePtr {
  Buffer* buffer = nullptr;
  size_t offset = 0;  // bytes

  DevicePtr operator+(int64_t floats) const { return {buffer, offset + static_cast<size_t>(floats) * sizeof(float)}; }
  DevicePtr bytes(size_t n) const { return {buffer, offset + n}; }
  bool operator==(const DevicePtr&) const = default;
};

}  // namespace shoal
