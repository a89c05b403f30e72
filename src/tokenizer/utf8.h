// UTF-8 helpers shared by the encoder and the decoders.
//
// Invalid input is never rejected: like the WHATWG decoder, Rust's String::from_utf8_lossy and
// therefore HF tokenizers (which only ever see text that was already decoded that way), each
// "maximal subpart" of an ill-formed sequence (Unicode ch. 3, U+FFFD substitution of maximal
// subparts) becomes one U+FFFD. Surrogate code points (ED A0..BF ..), overlongs (C0, C1, E0 80..9F,
// F0 80..8F) and values above U+10FFFF (F4 90.., F5..FF) are ill-formed.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Result of examining the bytes at the start of a buffer.
struct Utf8Step {
  enum Kind { kValid, kInvalid, kIncomplete } kind;
  size_t length;  // kValid: the character's length; kInvalid: the maximal subpart's length (>= 1);
                  // kIncomplete: bytes available, all a valid prefix of a longer character
};

// Examines s[0..] (s non-empty). kIncomplete only when the buffer ends inside a valid prefix.
Utf8Step utf8_step(std::string_view s);

// True when s is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

// Appends s to out, replacing each maximal ill-formed subpart with U+FFFD (a truncated
// sequence at the end also becomes one U+FFFD).
void append_utf8_lossy(std::string_view s, std::string& out);

// Returns s with ill-formed subparts replaced (a copy; callers check is_valid_utf8 first).
std::string to_valid_utf8(std::string_view s);

// Appends code point cp (must be a valid scalar value) as UTF-8.
void append_code_point(uint32_t cp, std::string& out);

}  // namespace dsv4::tokenizer
