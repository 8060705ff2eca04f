// Helpers for the libFuzzer targets: the input as a file for parsers that read one.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/untrusted_file.h"

namespace bpfdiag_fuzz {

// An anonymous in-memory file holding `data` (memfd: no disk, no name to clean up).
// -1 when it cannot be made (then the input is ignored).
inline int memfd_with(const uint8_t* data, size_t size) {
  int fd = memfd_create("fuzz", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return fd;
}

// The input as an UntrustedFile (what the ELF reader is given after open_untrusted).
inline std::shared_ptr<bpfdiag::UntrustedFile> untrusted_with(const uint8_t* data, size_t size) {
  int fd = memfd_with(data, size);
  if (fd < 0) return nullptr;
  auto f = std::make_shared<bpfdiag::UntrustedFile>(fd, size, 0, static_cast<uint64_t>(fd), 0, 0);
  f->set_name("fuzz-input");
  return f;
}

}  // namespace bpfdiag_fuzz
