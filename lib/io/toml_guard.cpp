// The toml++ guard (chapter 12): a small lexer that knows only comments and the four kinds of
// TOML string, enough to tell where a non-ASCII byte sits. Anything else it leaves to toml++.
#include "io/toml_guard.hpp"

#include "core/error.hpp"

#include <cstddef>

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
      } else if ((c == '"' || c == '\'') && glued_to_bare_text()) {
        step(); // not a string: invalid TOML, which toml++ reports; what follows is not quoted
      } else if (starts("\"\"\"")) {
        multi_line_basic();
      } else if (starts("'''")) {
        multi_line_literal();
      } else if (c == '"' || c == '\'') {
        single_line(c);
      } else {
        if (non_ascii(c))
          fail("a non-ASCII character outside quotes (TOML keys and values other than strings "
               "are ASCII); put it in a quoted string");
        step();
      }
    }
  }

private:
  bool starts(std::string_view s) const { return text_.substr(at_, s.size()) == s; }

  // A quote right after a bare key's or value's character (`19"`, `a"`) opens no string in TOML:
  // toml++ reads on as bare text, so the lexer must not take what follows for a string's inside.
  // (fuzz/config_fuzz found `steps = 19"""[...` followed by non-ASCII bytes.)
  bool glued_to_bare_text() const {
    if (at_ == 0) return false;
    const char p = text_[at_ - 1];
    return (p >= 'a' && p <= 'z') || (p >= 'A' && p <= 'Z') || (p >= '0' && p <= '9') || p == '_' ||
           p == '-' || p == '+' || p == ':';
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
};

} // namespace

void guard_toml_text(std::string_view toml_text, const std::string& source) {
  Lexer(toml_text, source).run();
}

} // namespace tinyscale::io
