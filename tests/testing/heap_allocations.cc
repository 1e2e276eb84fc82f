#include "tests/testing/heap_allocations.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

// (GCC 12 cannot see that the replaced new and delete pair up, and warns.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
// Over-aligned types (alignas(64) buffers, as the kernels use) come through these: without
// them their allocations would go uncounted.
void* operator new(size_t size, std::align_val_t alignment) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const size_t align = static_cast<size_t>(alignment);
  const size_t rounded = (std::max<size_t>(size, 1) + align - 1) / align * align;
  if (void* p = std::aligned_alloc(align, rounded)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace quill::testing {

int64_t HeapAllocations() { return g_allocations.load(std::memory_order_relaxed); }

}  // namespace quill::testing
