// ehtab FILE... : builds the compact table for each file and prints its size and cost.
// ehtab -o OUT FILE : also writes the rows (binary, Row[]) to OUT.
#include <cstdio>
#include <cstring>

#include "ehtab.h"

int main(int argc, char** argv) {
  const char* out = nullptr;
  int a = 1;
  if (argc > 2 && !strcmp(argv[1], "-o")) out = argv[2], a = 3;
  for (; a < argc; ++a) {
    ehtab::Table t;
    std::string err;
    if (!ehtab::build(argv[a], t, err)) {
      std::fprintf(stderr, "%s: %s\n", argv[a], err.c_str());
      continue;
    }
    const auto& s = t.st;
    std::printf("{\"file\":\"%s\",\"eh_frame_bytes\":%lu,\"fdes\":%lu,\"raw_rows\":%lu,\"rows\":%lu,"
                "\"table_bytes\":%lu,\"gaps\":%lu,\"cfa_plt\":%lu,\"cfa_expr_unsupported\":%lu,"
                "\"rbp_unsupported\":%lu,\"ra_not_cfa_minus_8\":%lu,\"ra_undefined\":%lu,\"off_overflow\":%lu,"
                "\"build_ms\":%.1f}\n",
                argv[a], s.eh_frame_bytes, s.fdes, s.raw_rows, s.rows, s.rows * sizeof(ehtab::Row), s.gaps,
                s.cfa_plt, s.cfa_expr_unsupported, s.rbp_unsupported, s.ra_not_cfa_minus_8, s.ra_undefined,
                s.off_overflow, s.build_ms);
    if (out) {
      FILE* f = std::fopen(out, "wb");
      std::fwrite(t.rows.data(), sizeof(ehtab::Row), t.rows.size(), f);
      std::fclose(f);
    }
  }
  return 0;
}
