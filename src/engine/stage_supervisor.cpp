#include "engine/stage_supervisor.h"

namespace shoal {

const char* member_state_name(MemberState state) {
  switch (state) {
    case MemberState::Idle: return "idle";
    case MemberState::Active: return "active";
    case MemberState::Rejoining: return "rejoining";
    case MemberState::Lost: return "lost";
    case MemberState::Unreachable: return "unreachable";
    case MemberState::Discovered: return "discovered";
    case MemberState::Dropped: return "dropped";
  }
  return "?";
}

}  // namespace shoal
