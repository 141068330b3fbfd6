#include "text/jinja/lexer.h"

#include <charconv>
#include <cstdlib>

#include "text/jinja/unicode.h"

namespace weir::jinja {

namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& options, std::string_view name)
      : src_(source), options_(options), name_(name), lines_(source) {}

  std::vector<Token> run();

 private:
  // What the end of the previous tag does to the text after it.
  enum class After { Nothing, StripAll, TrimNewline };

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    fail_at(name_, lines_.at(offset), message);
  }
  bool starts(size_t i, std::string_view s) const { return src_.substr(i, s.size()) == s && i + s.size() <= end_; }
  size_t skip_space(size_t i, size_t end) const;
  size_t find_tag(size_t i) const;
  void apply(After after, size_t& begin, size_t end) const;
  size_t rstrip(size_t begin, size_t end) const;
  size_t lstrip_line(size_t begin, size_t end) const;
  void emit_text(size_t begin, size_t end);
  void push(TokenType type, size_t offset, std::string text = {});
  After after_close(char modifier, bool block) const;

  size_t comment(size_t tag, size_t body, After& after);
  bool raw_start(size_t body, size_t* close, char* close_mod) const;
  size_t raw(size_t tag, size_t close, char close_mod, After& after);
  size_t tag_tokens(size_t tag, char kind, size_t body, After& after);
  size_t number(size_t i, bool int_only);
  size_t string(size_t i);

  std::string_view src_;
  LexOptions options_;
  std::string_view name_;
  LineMap lines_;
  size_t end_ = 0;
  std::vector<Token> out_;
};

size_t Lexer::skip_space(size_t i, size_t end) const {
  while (i < end) {
    size_t j = i;
    if (!is_space(utf8_next(src_, j))) break;
    i = j;
  }
  return i;
}

size_t Lexer::find_tag(size_t i) const {
  for (size_t j = src_.find('{', i); j != std::string_view::npos && j + 1 < end_; j = src_.find('{', j + 1)) {
    const char c = src_[j + 1];
    if (c == '{' || c == '%' || c == '#') return j;
  }
  return std::string_view::npos;
}

void Lexer::apply(After after, size_t& begin, size_t end) const {
  if (after == After::StripAll) {
    begin = skip_space(begin, end);
  } else if (after == After::TrimNewline && begin < end) {
    if (src_[begin] == '\r') {
      ++begin;
      if (begin < end && src_[begin] == '\n') ++begin;
    } else if (src_[begin] == '\n') {
      ++begin;
    }
  }
}

size_t Lexer::rstrip(size_t begin, size_t end) const {
  size_t last = begin;  // end of the last non-space character
  for (size_t i = begin; i < end;) {
    if (!is_space(utf8_next(src_, i))) last = i;
  }
  return last;
}

// lstrip_blocks: drops the whitespace between the start of the last line and
// `end` when nothing else is on that line.
size_t Lexer::lstrip_line(size_t begin, size_t end) const {
  size_t line = end;
  while (line > begin && src_[line - 1] != '\n' && src_[line - 1] != '\r') --line;
  const bool at_line_start = line > begin || begin == 0 || src_[begin - 1] == '\n' || src_[begin - 1] == '\r';
  if (!at_line_start) return end;
  return skip_space(line, end) == end ? line : end;
}

void Lexer::push(TokenType type, size_t offset, std::string text) {
  Token t;
  t.type = type;
  t.text = std::move(text);
  t.pos = lines_.at(offset);
  out_.push_back(std::move(t));
}

void Lexer::emit_text(size_t begin, size_t end) {
  if (begin >= end) return;
  std::string text;
  text.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    if (src_[i] == '\r') {
      text.push_back('\n');
      if (i + 1 < end && src_[i + 1] == '\n') ++i;
    } else {
      text.push_back(src_[i]);
    }
  }
  push(TokenType::Text, begin, std::move(text));
}

Lexer::After Lexer::after_close(char modifier, bool block) const {
  if (modifier == '-') return After::StripAll;
  if (modifier == '+' || !block || !options_.trim_blocks) return After::Nothing;
  return After::TrimNewline;
}

std::vector<Token> Lexer::run() {
  end_ = src_.size();
  if (end_ && src_[end_ - 1] == '\n') {
    --end_;
    if (end_ && src_[end_ - 1] == '\r') --end_;
  } else if (end_ && src_[end_ - 1] == '\r') {
    --end_;
  }
  size_t i = 0;
  After after = After::Nothing;
  for (;;) {
    const size_t tag = find_tag(i);
    size_t text_begin = i;
    size_t text_end = tag == std::string_view::npos ? end_ : tag;
    apply(after, text_begin, text_end);
    after = After::Nothing;
    if (tag == std::string_view::npos) {
      emit_text(text_begin, text_end);
      break;
    }
    const char kind = src_[tag + 1];
    char mod = tag + 2 < end_ ? src_[tag + 2] : 0;
    if (mod != '-' && mod != '+') mod = 0;
    if (mod == '-') text_end = rstrip(text_begin, text_end);
    else if (kind != '{' && options_.lstrip_blocks && mod != '+') text_end = lstrip_line(text_begin, text_end);
    emit_text(text_begin, text_end);
    const size_t body = tag + 2 + (mod ? 1 : 0);
    size_t close = 0;
    char close_mod = 0;
    if (kind == '#') i = comment(tag, body, after);
    else if (kind == '%' && raw_start(body, &close, &close_mod)) i = raw(tag, close, close_mod, after);
    else i = tag_tokens(tag, kind, body, after);
  }
  push(TokenType::End, end_);
  return std::move(out_);
}

size_t Lexer::comment(size_t tag, size_t body, After& after) {
  if (body >= end_) return end_;  // jinja2 drops a "{#" that ends the template
  const size_t close = src_.find("#}", body);
  if (close == std::string_view::npos || close + 2 > end_) fail(tag, "unclosed comment: no '#}' after this '{#'");
  const char mod = close > body ? src_[close - 1] : 0;
  after = after_close(mod == '-' || mod == '+' ? mod : 0, true);
  return close + 2;
}

// Whether the block tag whose inside starts at `body` is {% raw %}; sets
// where its "%}" is and the modifier before it.
bool Lexer::raw_start(size_t body, size_t* close, char* close_mod) const {
  size_t j = skip_space(body, end_);
  if (!starts(j, "raw") || (j + 3 < end_ && is_name_char(src_[j + 3]))) return false;
  j = skip_space(j + 3, end_);
  *close_mod = 0;
  if (j < end_ && src_[j] == '-') *close_mod = src_[j++];  // jinja2 takes no "+%}" here
  if (!starts(j, "%}")) return false;
  *close = j;
  return true;
}

size_t Lexer::raw(size_t tag, size_t close, char close_mod, After& after) {
  size_t body_begin = close + 2;
  if (close_mod == '-') body_begin = skip_space(body_begin, end_);
  for (size_t at = src_.find("{%", body_begin); at != std::string_view::npos && at < end_;
       at = src_.find("{%", at + 1)) {
    size_t j = at + 2;
    char open_mod = 0;
    if (j < end_ && (src_[j] == '-' || src_[j] == '+')) open_mod = src_[j++];
    j = skip_space(j, end_);
    if (!starts(j, "endraw") || (j + 6 < end_ && is_name_char(src_[j + 6]))) continue;
    j = skip_space(j + 6, end_);
    char end_mod = 0;
    if (j < end_ && (src_[j] == '-' || src_[j] == '+')) end_mod = src_[j++];
    if (!starts(j, "%}")) continue;
    size_t body_end = at;
    if (open_mod == '-') body_end = rstrip(body_begin, body_end);
    else if (options_.lstrip_blocks && open_mod != '+') body_end = lstrip_line(body_begin, body_end);
    emit_text(body_begin, body_end);
    after = after_close(end_mod, true);
    return j + 2;
  }
  fail(tag, "unclosed {% raw %}: no {% endraw %} after it");
}

size_t Lexer::tag_tokens(size_t tag, char kind, size_t body, After& after) {
  const bool block = kind == '%';
  push(block ? TokenType::BlockBegin : TokenType::VarBegin, tag);
  std::vector<char> brackets;
  size_t j = body;
  for (;;) {
    j = skip_space(j, end_);
    if (j >= end_) fail(tag, block ? "unclosed tag: no '%}' after this '{%'" : "unclosed tag: no '}}' after this '{{'");
    if (brackets.empty()) {
      const char* close = block ? "%}" : "}}";
      char mod = 0;
      if ((src_[j] == '-' || (block && src_[j] == '+')) && starts(j + 1, close)) mod = src_[j];
      if (mod || starts(j, close)) {
        push(block ? TokenType::BlockEnd : TokenType::VarEnd, j);
        after = after_close(mod, block);
        return j + (mod ? 3 : 2);
      }
    }
    const char c = src_[j];
    if (is_name_start(c)) {
      size_t k = j;
      while (k < end_ && is_name_char(src_[k])) ++k;
      push(TokenType::Name, j, std::string(src_.substr(j, k - j)));
      j = k;
      continue;
    }
    if (is_digit(c)) {
      const bool after_dot = !out_.empty() && out_.back().type == TokenType::Operator && out_.back().text == ".";
      j = number(j, after_dot);
      continue;
    }
    if (c == '\'' || c == '"') {
      j = string(j);
      continue;
    }
    static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
    std::string op;
    for (const char* t : two)
      if (starts(j, t)) op = t;
    if (op.empty() && std::string_view("+-*/%~()[]{},.:|=<>;").find(c) != std::string_view::npos) op = std::string(1, c);
    if (op.empty()) {
      size_t k = j;
      const char32_t cp = utf8_next(src_, k);
      std::string shown;
      utf8_append(shown, cp);
      fail(j, "unexpected character '" + shown + "' in a tag");
    }
    if (op == "(" || op == "[" || op == "{") {
      brackets.push_back(op[0]);
    } else if (op == ")" || op == "]" || op == "}") {
      const char want = op == ")" ? '(' : op == "]" ? '[' : '{';
      if (brackets.empty() || brackets.back() != want) fail(j, "unexpected '" + op + "'");
      brackets.pop_back();
    }
    push(TokenType::Operator, j, op);
    j += op.size();
  }
}

size_t Lexer::number(size_t i, bool int_only) {
  size_t k = i;
  auto digits = [&](auto is_ok) {
    // Digits with single underscores between them.
    std::string d;
    while (k < end_ && (is_ok(src_[k]) || (src_[k] == '_' && k + 1 < end_ && is_ok(src_[k + 1]) && !d.empty()))) {
      if (src_[k] != '_') d.push_back(src_[k]);
      ++k;
    }
    return d;
  };
  Token t;
  t.pos = lines_.at(i);
  if (src_[i] == '0' && i + 1 < end_ && std::string_view("xXoObB").find(src_[i + 1]) != std::string_view::npos) {
    const char p = static_cast<char>(src_[i + 1] | 0x20);
    const int base = p == 'x' ? 16 : p == 'o' ? 8 : 2;
    k = i + 2;
    if (k < end_ && src_[k] == '_') ++k;
    const std::string d = digits([base](char c) { const int h = hex_digit(c); return h >= 0 && h < base; });
    if (d.empty()) fail(i, "invalid number literal");
    const auto r = std::from_chars(d.data(), d.data() + d.size(), t.int_value, base);
    if (r.ec != std::errc()) fail(i, "integer literal " + std::string(src_.substr(i, k - i)) + " does not fit 64 bits (unsupported)");
    t.type = TokenType::Int;
    t.text = std::string(src_.substr(i, k - i));
    out_.push_back(std::move(t));
    return k;
  }
  std::string text = digits(is_digit);
  bool is_float = false;
  if (!int_only) {
    if (k + 1 < end_ && src_[k] == '.' && is_digit(src_[k + 1])) {
      ++k;
      text += '.';
      text += digits(is_digit);
      is_float = true;
    }
    if (k < end_ && (src_[k] == 'e' || src_[k] == 'E')) {
      size_t e = k + 1;
      if (e < end_ && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < end_ && is_digit(src_[e])) {
        const std::string sign = src_[k + 1] == '-' ? "-" : "";
        k = e;
        text += 'e';
        text += sign;
        text += digits(is_digit);
        is_float = true;
      }
    }
  }
  t.text = std::string(src_.substr(i, k - i));
  if (is_float) {
    t.type = TokenType::Float;
    t.float_value = std::strtod(text.c_str(), nullptr);
  } else {
    if (text.size() > 1 && text[0] == '0' && text.find_first_not_of('0') != std::string::npos)
      fail(i, "invalid integer literal '" + t.text + "' (leading zeros)");
    t.type = TokenType::Int;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
    if (r.ec != std::errc()) fail(i, "integer literal " + t.text + " does not fit 64 bits (unsupported)");
  }
  out_.push_back(std::move(t));
  return k;
}

size_t Lexer::string(size_t i) {
  const char quote = src_[i];
  std::string out;
  size_t k = i + 1;
  auto hex = [&](size_t at, int n) {
    uint32_t v = 0;
    for (int d = 0; d < n; ++d) {
      const int h = at + d < end_ ? hex_digit(src_[at + d]) : -1;
      if (h < 0) fail(k, "truncated \\" + std::string(1, src_[k + 1]) + " escape in a string");
      v = v * 16 + static_cast<uint32_t>(h);
    }
    return v;
  };
  while (k < end_ && src_[k] != quote) {
    const char c = src_[k];
    if (c == '\r') {
      out.push_back('\n');
      k += k + 1 < end_ && src_[k + 1] == '\n' ? 2 : 1;
      continue;
    }
    if (c != '\\') {
      out.push_back(c);
      ++k;
      continue;
    }
    if (k + 1 >= end_) break;
    const char e = src_[k + 1];
    size_t next = k + 2;
    uint32_t cp = 0;
    bool is_cp = false;
    switch (e) {
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'v': out.push_back('\v'); break;
      case '\n': break;  // a line continuation
      case '\r':
        if (next < end_ && src_[next] == '\n') ++next;
        break;
      case 'x': cp = hex(k + 2, 2), next = k + 4, is_cp = true; break;
      case 'u': cp = hex(k + 2, 4), next = k + 6, is_cp = true; break;
      case 'U': cp = hex(k + 2, 8), next = k + 10, is_cp = true; break;
      case 'N': fail(k, "\\N{...} escapes in strings are not supported");
      default:
        if (e >= '0' && e <= '7') {
          is_cp = true;
          next = k + 1;
          for (int d = 0; d < 3 && next < end_ && src_[next] >= '0' && src_[next] <= '7'; ++d)
            cp = cp * 8 + static_cast<uint32_t>(src_[next++] - '0');
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          fail(k, "a backslash before a non-ASCII character in a string is not supported");
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
    if (is_cp) {
      if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) fail(k, "escape for an invalid code point in a string");
      utf8_append(out, cp);
    }
    k = next;
  }
  if (k >= end_) fail(i, "unterminated string");
  Token t;
  t.type = TokenType::String;
  t.text = std::move(out);
  t.pos = lines_.at(i);
  out_.push_back(std::move(t));
  return k + 1;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& options, std::string_view name) {
  return Lexer(source, options, name).run();
}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::Text: return "text";
    case TokenType::VarBegin: return "'{{'";
    case TokenType::VarEnd: return "'}}'";
    case TokenType::BlockBegin: return "'{%'";
    case TokenType::BlockEnd: return "'%}'";
    case TokenType::Name: return "name '" + t.text + "'";
    case TokenType::String: return "a string";
    case TokenType::Int:
    case TokenType::Float: return "number " + t.text;
    case TokenType::Operator: return "'" + t.text + "'";
    case TokenType::End: return "end of template";
  }
  return "?";
}

}  // namespace weir::jinja
