// <immintrin.h>, included once for every SIMD file. GCC 12 reports its own _mm512_undefined_*
// placeholders as uninitialized (GCC bug 105593): those warnings are silenced for the header only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
