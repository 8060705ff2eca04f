// Files embedded into the binaries at build time (see cmake/EmbedScript.cmake).
#pragma once

namespace bpfdiag {

struct EmbeddedFile {
  const char* name;  // base name, e.g. "naptime.bpf.c"
  const char* text;
};

// Shared headers from bpf_sources/*.h, written into the BPF include shim at load time.
extern const EmbeddedFile kEmbeddedBpfHeaders[];
// The built-in wait-site rules (common/wait_sites.rules).
extern const EmbeddedFile kEmbeddedWaitRules[];

}  // namespace bpfdiag
