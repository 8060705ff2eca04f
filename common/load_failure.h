// The kernel's refusal of a program, as one line: the verifier's reason and the
// instructions it processed, read from the log libbcc printed.
#pragma once
#include <string>

namespace bpfdiag {

// One line for program `fn` refused at load, from what libbcc printed meanwhile
// (`printed`: the verifier log, or libbcc's E2BIG note) and libbcc's status message:
// "the kernel verifier rejected FN: REASON (processed N insns)" when it was the
// verifier, "cannot load FN: ..." otherwise.
std::string load_failure_line(const std::string& fn, const std::string& printed, const std::string& bcc_msg);
}  // namespace bpfdiag
