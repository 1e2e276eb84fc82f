#pragma once

#include <cstdint>

namespace quill::testing {

// Linking quill::heap_allocations into a test binary replaces the global operator new with
// one that counts every allocation, of every thread, so that a test can prove a hot path
// allocates nothing (or exactly what it hands out). Only for test binaries that need it.
int64_t HeapAllocations();

}  // namespace quill::testing
