// Base64 (RFC 4648, with padding): how OpenAI's /v1/embeddings sends
// vectors with encoding_format "base64" (the float32 values' little-endian
// bytes).
#pragma once
#include <string>
#include <string_view>

namespace weir::openai {

std::string base64_encode(std::string_view bytes);

}  // namespace weir::openai
