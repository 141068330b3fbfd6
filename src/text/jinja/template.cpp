#include "text/jinja/template.h"

#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"
#include "text/jinja/render.h"
#include "text/jinja/unicode.h"
#include "text/utf8_streamer.h"

namespace weir::jinja {

Template::Template(std::string source, Options options) : source_(std::move(source)), options_(std::move(options)) {
  if (!is_valid_utf8(source_)) {
    size_t i = 0;
    while (i < source_.size()) {
      const size_t at = i;
      const char32_t c = utf8_next(source_, i);
      if (c >= 0xdc80 && c <= 0xdcff) fail_at(options_.name, LineMap(source_).at(at), "the template is not valid UTF-8");
    }
  }
  LexOptions lex;
  lex.trim_blocks = options_.trim_blocks;
  lex.lstrip_blocks = options_.lstrip_blocks;
  body_ = std::make_shared<const Body>(parse(tokenize(source_, lex, options_.name), options_.name));
}

std::string Template::render(const Value& context, const RenderLimits& limits) const {
  return jinja::render(*body_, context, options_.render_name.empty() ? options_.name : options_.render_name, limits);
}

}  // namespace weir::jinja
