// Moved into common/symbolize.h (one ELF reader, one kallsyms parser).
#pragma once
#include "common/symbolize.h"  // IWYU pragma: export
