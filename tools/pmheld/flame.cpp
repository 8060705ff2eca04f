// pmheld --svg: each lock's acquiring stacks as folded stacks (common/stacks.h's
// folding), rendered by common/flamegraph with the off-CPU palette in run.cpp.
#include "tools/pmheld/pmheld.h"

namespace pmheld {
using namespace bpfdiag;

void add_folded_holds(const std::vector<LockHold>& locks, FoldedSet& out) {
  for (const auto& l : locks)
    for (const auto& s : l.stacks) {
      Stack st;
      st.want_kernel = false;
      st.user.push_back("lock " + lock_name(l));  // the lock is the innermost frame
      if (s.missing) st.user.push_back("[Missed User Stack]");
      else st.user.insert(st.user.end(), s.frames.begin(), s.frames.end());
      out.add(l.comm, st, s.total_ns / 1000);
    }
}

}  // namespace pmheld
