// The toml++ guard (chapter 12). Two steps:
//  1. toml++ parses a copy of the text with every non-ASCII character replaced by '?'. That copy
//     is ASCII, which toml++ reads safely. '?' is valid TOML only inside strings and comments, so
//     when the copy parses, toml++ itself has placed every non-ASCII character of the original in
//     a string or a comment; when it does not, the original is never handed to toml++.
//  2. A small lexer that knows only comments and the four kinds of TOML string finds the
//     characters toml++ 3.3.0 cannot read even inside a string, and names a non-ASCII character
//     outside quotes with a clearer message than step 1's '?'.
#include "io/toml_guard.hpp"

#include "core/error.hpp"

#include <toml++/toml.h>

#include <cstddef>
#include <string>

namespace tinyscale::io {

namespace {

bool non_ascii(char c) { return static_cast<unsigned char>(c) >= 0x80; }

class Lexer {
public:
  Lexer(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  void run() {
    if (starts("\xEF\xBB\xBF")) at_ = 3; // a UTF-8 byte order mark, which TOML allows
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == '#') {
        skip_to_line_end();
      } else if ((c == '"' || c == '\'') && !string_may_open_here()) {
        bare(); // not a string: invalid TOML, which toml++ reports; what follows is not quoted
      } else if (starts("\"\"\"")) {
        multi_line_basic();
      } else if (starts("\'\'\'")) {
        multi_line_literal();
      } else if (c == '"' || c == '\'') {
        single_line(c);
      } else {
        if (non_ascii(c))
          fail("a non-ASCII character outside quotes (TOML keys and values other than strings "
               "are ASCII); put it in a quoted string");
        bare();
      }
    }
  }

private:
  bool starts(std::string_view s) const { return text_.substr(at_, s.size()) == s; }

  // TOML opens a string only where a key or a value begins: at a line's start, after `=`, after
  // `.` in a dotted key, after `[` or `,` in an array or a table header, after `{` or `,` in an
  // inline table. Anywhere else (`19"`, `"x""`, `] "`) the quote is invalid TOML and toml++ may
  // read on as bare text, so the lexer must not take what follows for a string's inside: it
  // treats the quote as bare text and refuses the non-ASCII bytes after it. (fuzz/config_fuzz
  // found `steps = 19"""[...` and `steps = 19I""[...` followed by non-ASCII bytes.)
  bool string_may_open_here() const {
    const char p = last_significant_;
    return p == '\n' || p == '=' || p == '.' || p == '[' || p == ',' || p == '{';
  }

  // One byte of bare text; spaces and tabs do not change what came last.
  void bare() {
    if (text_[at_] != ' ' && text_[at_] != '\t') last_significant_ = text_[at_];
    step();
  }

  void step() {
    if (text_[at_] == '\n') {
      ++line_;
      line_start_ = at_ + 1;
    }
    ++at_;
  }

  void skip_to_line_end() {
    while (at_ < text_.size() && text_[at_] != '\n') step();
  }

  // "..." or '...': up to the closing quote, or the end of the line (toml++ reports that).
  void single_line(char quote) {
    step();
    while (at_ < text_.size() && text_[at_] != quote && text_[at_] != '\n') {
      if (quote == '"' && text_[at_] == '\\' && at_ + 1 < text_.size() && text_[at_ + 1] != '\n')
        step();
      step();
    }
    if (at_ < text_.size() && text_[at_] == quote) step();
    last_significant_ = quote;
  }

  // '''...''': no escapes; up to two quotes may end the content before the closing three.
  void multi_line_literal() {
    at_ += 3;
    while (at_ < text_.size() && !starts("'''")) step();
    close_multi_line('\'');
  }

  // """...""": escapes, and a backslash at the end of a line trims the whitespace that follows.
  void multi_line_basic() {
    at_ += 3;
    while (at_ < text_.size() && !starts("\"\"\"")) {
      if (text_[at_] != '\\') {
        step();
        continue;
      }
      step();
      if (at_ < text_.size() && non_ascii(text_[at_]))
        fail("a non-ASCII character right after a backslash in a \"\"\"multi-line\"\"\" string "
             "(not a TOML escape); write it without the backslash");
      if (at_ >= text_.size() ||
          (text_[at_] != ' ' && text_[at_] != '\t' && text_[at_] != '\n' && text_[at_] != '\r')) {
        if (at_ < text_.size()) step(); // an escape such as \" or \\ or \n
        continue;
      }
      while (at_ < text_.size() &&
             (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
        step();
      if (at_ < text_.size() && non_ascii(text_[at_]))
        fail(
            "a non-ASCII character first after a line-ending backslash in a \"\"\"multi-line\"\"\" "
            "string, which toml++ 3.3.0 cannot read safely; write it as a \\u escape or move it "
            "to the line before the backslash");
    }
    close_multi_line('"');
  }

  void close_multi_line(char quote) {
    for (int i = 0; i < 3 && at_ < text_.size(); ++i) step();
    for (int extra = 0; extra < 2 && at_ < text_.size() && text_[at_] == quote; ++extra) step();
    last_significant_ = quote;
  }

  [[noreturn]] void fail(const char* what) const {
    throw Error(detail::concat(source_, ":", line_, ":", at_ - line_start_ + 1,
                               ": expected valid TOML, found ", what, " (byte 0x", std::hex,
                               static_cast<unsigned>(static_cast<unsigned char>(text_[at_])),
                               "); fix that line"));
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t at_ = 0;
  std::size_t line_ = 1;
  std::size_t line_start_ = 0;
  char last_significant_ = '\n'; // the last byte that was not a space, a tab or inside a string
};

// The text with each non-ASCII character (a well-formed UTF-8 sequence, else a single byte)
// replaced by one '?', so that toml++'s columns, which count characters, stay those of the text.
// A leading byte order mark is kept: toml++ skips it.
std::string ascii_copy(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") {
    out = text.substr(0, 3);
    at = 3;
  }
  while (at < text.size()) {
    const auto lead = static_cast<unsigned char>(text[at]);
    if (lead < 0x80) {
      out += text[at++];
      continue;
    }
    const std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    std::size_t n = 1;
    while (n < length && at + n < text.size() &&
           (static_cast<unsigned char>(text[at + n]) & 0xC0) == 0x80)
      ++n;
    at += n == length ? length : 1;
    out += '?';
  }
  return out;
}

} // namespace

void guard_toml_text(std::string_view toml_text, const std::string& source) {
  try {
    (void)toml::parse(ascii_copy(toml_text), std::string_view(source));
  } catch (const toml::parse_error&) {
    Lexer(toml_text, source).run(); // a clearer message when the cause is a non-ASCII character
    throw;
  }
  Lexer(toml_text, source).run();
}

} // namespace tinyscale::io
