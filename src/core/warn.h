// Warnings for users: something in range but suspicious (a special token id
// outside the vocabulary, a context length of zero). By default each goes to
// stderr as one line, "weir: warning: <message>"; a program (tests, the
// server's log) can send them elsewhere.
#pragma once
#include <functional>
#include <string>

namespace weir {

void warn(const std::string& message);
// Replaces where warnings go (an empty function: back to stderr); returns
// the previous sink.
std::function<void(const std::string&)> set_warning_sink(std::function<void(const std::string&)> sink);

}  // namespace weir
