// lockstat --svg: the contended locks' call sites as folded stacks (common/stacks.h's
// folding), rendered by common/flamegraph with the off-CPU palette in run.cpp.
#include "common/table.h"
#include "tools/lockstat/lockstat.h"

namespace lockstat {
using namespace bpfdiag;

void add_folded_waits(const Report& rep, FoldedSet& out) {
  for (const auto& l : rep.locks) {
    std::string lock = "lock " + (l.symbol.empty() ? l.kind + " " + hex_addr(l.addr) : l.symbol);
    for (const auto& site : l.sites) {
      Stack st;
      std::vector<std::string>& part = l.layer == "kernel" ? st.kernel : st.user;
      part.push_back(lock);  // the lock is the innermost frame
      part.insert(part.end(), site.stack.begin(), site.stack.end());
      if (l.layer == "kernel") st.want_user = false;
      else st.want_kernel = false;
      out.add(l.comm.empty() ? "[kernel]" : l.comm, st, site.total_ns / 1000);
    }
  }
}

}  // namespace lockstat
