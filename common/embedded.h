// Files embedded into the binaries at build time (see cmake/EmbedScript.cmake).
#pragma once

namespace bpfdiag {

struct EmbeddedFile {
  const char* name;  // base name, e.g. "naptime.bpf.c"
  const char* text;
};

// Shared headers from bpf_sources/*.h, written into the BPF include shim at load time.
extern const EmbeddedFile kEmbeddedBpfHeaders[];

}  // namespace bpfdiag
