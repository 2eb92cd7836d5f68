// TINYSCALE_ASAN is 1 where AddressSanitizer instruments the file being compiled, 0 elsewhere.
// GCC says so with __SANITIZE_ADDRESS__; clang (before 17) only through __has_feature.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define TINYSCALE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TINYSCALE_ASAN 1
#endif
#endif
#ifndef TINYSCALE_ASAN
#define TINYSCALE_ASAN 0
#endif
