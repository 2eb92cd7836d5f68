// toml++'s debug assertions in the fuzz build, which compiles toml++ header-only (CMakeLists.txt,
// TINYSCALE_FUZZ) so that libFuzzer sees its branches. They are compiled out, as in the Debian
// libtomlplusplus (built with NDEBUG by GCC) that every other build links: tinyscale's users run
// that code, so that is the code to fuzz. ASan and UBSan still watch all of toml++.
//
// Why not leave them on: in toml++ 3.3.0 (Debian 12) several assert a precondition that the
// function itself checks on the next lines and reports as a toml::parse_error, which tinyscale
// turns into a tinyscale::Error naming the line. config_fuzz found two within seconds (the inputs
// are in fuzz/corpus/config/crash_toml_*, their outcome in tests/unit/test_fuzz_corpus.cpp):
//  - parser.inl parse_key(): "is_bare_key_character(*cp) || is_string_delimiter(*cp)", reached by
//    the table header "[= 64" (fixed upstream in marzer/tomlplusplus#301, after 3.3.0);
//  - parser.inl parse_value(): "!is_value_terminator(*cp)", reached by "a = [}".
// Not NDEBUG itself: with clang, NDEBUG turns those assertions into __builtin_assume, which would
// let the optimizer assume what these inputs break; this keeps GCC's behaviour (nothing at all).
#pragma once

#define TOML_ASSERT(expr) static_assert(true)
