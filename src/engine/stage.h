#pragma once
// A Stage is a contiguous range of transformer layers on one device, with
// the KV cache of those layers. LocalStage runs on a local Backend; a
// RemoteStage (cluster/) sends the same calls over the wire. The Pipeline
// only sees this interface, so local and distributed runs are the same code.
#include <string>

#include "model/batch.h"

namespace shoal {

class Stage {
 public:
  virtual ~Stage() = default;
  virtual int layer_begin() const = 0;
  virtual int layer_end() const = 0;  // exclusive
  virtual std::string describe() const = 0;

  // hidden: the residual stream [batch.size()][n_embd], updated in place.
  virtual void forward(const Batch& batch, float* hidden) = 0;
  // KV operations on one sequence slot.
  virtual void truncate_sequence(int seq, int n_pos) = 0;
  virtual void copy_sequence(int src, int dst, int n_pos) = 0;
};

}  // namespace shoal
