#include "engine/stop_strings.h"

#include <algorithm>
#include <string>

namespace weir {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

namespace {

// Where the earliest stop string in s starts (the longest of those starting
// there), or npos.
size_t first_match(const std::vector<std::string>& stops, const std::string& s, size_t* len) {
  size_t at = std::string::npos;
  for (const std::string& st : stops) {
    const size_t p = s.find(st);
    if (p != std::string::npos && (p < at || (p == at && st.size() > *len))) at = p, *len = st.size();
  }
  return at;
}

// Where the earliest tail of s starts that could still grow into a stop
// string (s.size() when none).
size_t first_partial(const std::vector<std::string>& stops, const std::string& s) {
  for (size_t p = 0; p < s.size(); ++p)
    for (const std::string& st : stops)
      if (s.size() - p < st.size() && s.compare(p, s.size() - p, st, 0, s.size() - p) == 0) return p;
  return s.size();
}

}  // namespace

std::string StopStrings::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  size_t len = 0;
  const size_t at = first_match(stops_, pending_, &len);
  // A stop string that may still complete and starts earlier than a whole
  // one wins: the earliest in the text ends it, as when searching the whole.
  const size_t partial = first_partial(stops_, pending_);
  if (at != std::string::npos && at <= partial) {
    stopped_ = true;
    matched_ = pending_.substr(at, len);
    std::string out = pending_.substr(0, at);
    pending_.clear();
    return out;
  }
  const size_t keep = std::min(partial, at);
  std::string out = pending_.substr(0, keep);
  pending_.erase(0, keep);
  return out;
}

std::string StopStrings::flush() {
  if (stopped_) return {};
  size_t len = 0;
  const size_t at = first_match(stops_, pending_, &len);
  std::string out;
  if (at != std::string::npos) {
    stopped_ = true;
    matched_ = pending_.substr(at, len);
    out = pending_.substr(0, at);
  } else {
    out = pending_;
  }
  pending_.clear();
  return out;
}

}  // namespace weir
