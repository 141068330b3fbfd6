#include "tools/args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>

namespace weir::tools {
namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  std::string n;
  while (std::getline(ss, n, ',')) out.push_back(n);
  return out;
}

long long parse_int(const std::string& name, const std::string& v, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    throw UsageError(name + ": expected an integer" + (lo >= 0 ? " >= 0" : "") + ", got '" + v + "'");
  return x;
}

}  // namespace

std::vector<int> parse_int_list(const std::string& name, const std::string& value) {
  std::vector<int> out;
  const auto bad = [&](const std::string& why) {
    return UsageError(name + ": " + why + " in '" + value + "' (expected N, N,M,..., FIRST-LAST, FIRST-LAST+STEP or FIRST-LAST*MULT)");
  };
  std::stringstream ss(value);
  std::string item;
  if (value.empty()) throw bad("empty list");
  while (std::getline(ss, item, ',')) {
    if (item.empty()) throw bad("empty item");
    // FIRST[-LAST[(+|*)STEP]]; a leading '-' belongs to FIRST.
    const size_t dash = item.find('-', 1);
    if (dash == std::string::npos) {
      out.push_back(int(parse_int(name, item, std::numeric_limits<int>::min(), std::numeric_limits<int>::max())));
      continue;
    }
    const int first = int(parse_int(name, item.substr(0, dash), 0, std::numeric_limits<int>::max()));
    std::string rest = item.substr(dash + 1);
    char op = '+';
    int step = 1;
    if (const size_t o = rest.find_first_of("+*"); o != std::string::npos) {
      op = rest[o];
      step = int(parse_int(name, rest.substr(o + 1), 0, std::numeric_limits<int>::max()));
      rest = rest.substr(0, o);
    }
    const int last = int(parse_int(name, rest, 0, std::numeric_limits<int>::max()));
    if (last < first) throw bad("range ends before it starts");
    if ((op == '+' && step < 1) || (op == '*' && (step < 2 || first < 1))) throw bad("range would not advance");
    for (long long i = first; i <= last; i = op == '+' ? i + step : i * step) {
      if (out.size() >= 4096) throw bad("more than 4096 values");
      out.push_back(int(i));
    }
  }
  return out;
}

uint64_t parse_size(const std::string& name, const std::string& value) {
  const auto bad = [&](const std::string& why) {
    return UsageError(name + ": '" + value + "': " + why + " (expected a size like 6G, 6144M or 1.5GiB)");
  };
  size_t digits = 0;
  while (digits < value.size() && (std::isdigit(static_cast<unsigned char>(value[digits])) || value[digits] == '.'))
    ++digits;
  if (digits == 0) throw bad("no number");
  char* end = nullptr;
  const std::string number = value.substr(0, digits);
  const double x = std::strtod(number.c_str(), &end);
  if (*end != '\0' || !std::isfinite(x)) throw bad("not a number");
  std::string unit = value.substr(digits);
  if (unit.empty()) throw bad("no unit");
  int shift = 0;
  switch (std::toupper(static_cast<unsigned char>(unit[0]))) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: throw bad("unknown unit");
  }
  unit = unit.substr(1);
  if (!unit.empty() && (unit[0] == 'i' || unit[0] == 'I')) unit = unit.substr(1);
  if (!unit.empty() && (unit[0] == 'b' || unit[0] == 'B')) unit = unit.substr(1);
  if (!unit.empty()) throw bad("unknown unit");
  const double bytes = std::ldexp(x, shift);
  if (!(bytes >= 1)) throw bad("expected more than 0 bytes");
  if (bytes >= std::ldexp(1.0, 63)) throw bad("too large");
  return uint64_t(bytes);
}

Args& Args::flag(const std::string& names, bool* out, const std::string& help) {
  Spec s{split_names(names), "", help, false, [out](const std::string&, const std::string&) { *out = true; }};
  specs_.push_back(std::move(s));
  return *this;
}

Args& Args::opt(const std::string& names, std::string* out, const std::string& meta, const std::string& help) {
  specs_.push_back({split_names(names), meta, help, true, [out](const std::string&, const std::string& v) { *out = v; }});
  return *this;
}

Args& Args::opt(const std::string& names, int* out, const std::string& meta, const std::string& help) {
  specs_.push_back({split_names(names), meta, help, true, [out](const std::string& n, const std::string& v) {
                      *out = int(parse_int(n, v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
                    }});
  return *this;
}

Args& Args::opt(const std::string& names, int64_t* out, const std::string& meta, const std::string& help) {
  specs_.push_back({split_names(names), meta, help, true, [out](const std::string& n, const std::string& v) {
                      *out = parse_int(n, v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
                    }});
  return *this;
}

Args& Args::opt(const std::string& names, uint64_t* out, const std::string& meta, const std::string& help) {
  specs_.push_back({split_names(names), meta, help, true, [out](const std::string& n, const std::string& v) {
                      *out = uint64_t(parse_int(n, v, 0, std::numeric_limits<int64_t>::max()));
                    }});
  return *this;
}

Args& Args::opt(const std::string& names, float* out, const std::string& meta, const std::string& help) {
  specs_.push_back({split_names(names), meta, help, true, [out](const std::string& n, const std::string& v) {
                      char* end = nullptr;
                      const float x = std::strtof(v.c_str(), &end);
                      if (v.empty() || *end != '\0' || !std::isfinite(x))
                        throw UsageError(n + ": expected a number, got '" + v + "'");
                      *out = x;
                    }});
  return *this;
}

Args& Args::opt_list(const std::string& names, std::vector<int>* out, const std::string& meta,
                     const std::string& help) {
  auto replaced = std::make_shared<bool>(false);
  specs_.push_back({split_names(names), meta, help, true, [out, replaced](const std::string& n, const std::string& v) {
                      std::vector<int> xs = parse_int_list(n, v);
                      if (!*replaced) out->clear(), *replaced = true;
                      out->insert(out->end(), xs.begin(), xs.end());
                    }});
  return *this;
}

Args& Args::opt_list(const std::string& names, std::vector<std::string>* out, const std::string& meta,
                     const std::string& help) {
  auto replaced = std::make_shared<bool>(false);
  specs_.push_back({split_names(names), meta, help, true, [out, replaced](const std::string& n, const std::string& v) {
                      if (!*replaced) out->clear(), *replaced = true;
                      std::stringstream ss(v);
                      std::string item;
                      while (std::getline(ss, item, ','))
                        if (!item.empty()) out->push_back(item);
                      if (v.empty()) throw UsageError(n + ": expected a value");
                    }});
  return *this;
}

Args& Args::opt_each(const std::string& names, std::vector<std::string>* out, const std::string& meta,
                     const std::string& help) {
  specs_.push_back({split_names(names), meta, help, true,
                    [out](const std::string&, const std::string& v) { out->push_back(v); }});
  return *this;
}

Args& Args::positional(const std::string& meta, std::string* out, const std::string& help) {
  positionals_.push_back({{}, meta, help, true, [out](const std::string&, const std::string& v) { *out = v; }});
  return *this;
}

bool Args::parse(int argc, char** argv) {
  size_t next_pos = 0;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(usage().c_str(), stdout);
      return false;
    }
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(a[1]) || a[1] == '.'))) {
      std::string value;
      bool has_value = false;
      if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_value = true;
      }
      Spec* spec = nullptr;
      for (auto& s : specs_)
        for (auto& n : s.names)
          if (n == a) spec = &s;
      if (!spec) throw UsageError("unknown option '" + a + "' for 'weir " + command_ + "'");
      if (spec->takes_value && !has_value) {
        if (i + 1 >= argc) throw UsageError(a + ": missing value (" + spec->meta + ")");
        value = argv[++i];
      } else if (!spec->takes_value && has_value) {
        throw UsageError(a + " takes no value");
      }
      spec->set(a, value);
      spec->seen = true;
      continue;
    }
    if (next_pos >= positionals_.size()) throw UsageError("unexpected argument '" + a + "'");
    positionals_[next_pos].set(positionals_[next_pos].meta, a);
    positionals_[next_pos++].seen = true;
  }
  for (auto& p : positionals_)
    if (!p.seen) throw UsageError("missing argument " + p.meta);
  return true;
}

bool Args::given(const std::string& name) const {
  for (auto& s : specs_)
    for (auto& n : s.names)
      if (n == name) return s.seen;
  return false;
}

std::string Args::usage() const {
  std::string u = "usage: weir " + command_ + " [options]";
  for (auto& p : positionals_) u += " " + p.meta;
  u += "\n" + summary_ + "\n\n";
  for (auto& p : positionals_) u += "  " + p.meta + std::string(28 - std::min<size_t>(27, p.meta.size()), ' ') + p.help + "\n";
  for (auto& s : specs_) {
    std::string left;
    for (auto& n : s.names) left += (left.empty() ? "" : ", ") + n;
    if (s.takes_value) left += " " + s.meta;
    u += "  " + left + std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') + s.help + "\n";
  }
  return u;
}

}  // namespace weir::tools
