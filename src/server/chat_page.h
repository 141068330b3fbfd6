// The chat page weir serve answers GET / with: src/server/chat_page.html,
// built into the binary (CMake reads it into chat_page.cpp, generated).
#pragma once
#include <string_view>

namespace weir::server {

std::string_view chat_page_html();

}  // namespace weir::server
