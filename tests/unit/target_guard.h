#pragma once
// Restores Highway's normal target choice when a test that forced targets
// one by one (hwy::SetSupportedTargetsForTest) ends, even on a failed ASSERT.
#include "hwy/targets.h"

namespace shoal {

struct TargetGuard {
  ~TargetGuard() { hwy::SetSupportedTargetsForTest(0); }
};

}  // namespace shoal
