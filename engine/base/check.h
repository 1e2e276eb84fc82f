#pragma once

#include <cstdlib>

#include "spdlog/spdlog.h"

// QUILL_CHECK is for invariants whose violation is a bug in Quill, never for bad input
// (bad input returns an absl::Status). It logs the failed condition and aborts.
#define QUILL_CHECK(cond)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      spdlog::critical("CHECK failed at {}:{}: {}", __FILE__, __LINE__, #cond);        \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#ifdef NDEBUG
#define QUILL_DCHECK(cond) \
  do {                     \
  } while (0)
#else
#define QUILL_DCHECK(cond) QUILL_CHECK(cond)
#endif
