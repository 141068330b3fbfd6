// Stop strings for generated text (OpenAI's `stop`): the text is streamed
// as it comes, but any tail that could still grow into a stop string is held
// back, so a stop string split across tokens is never half sent. The stop
// string itself is not part of the output.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace weir {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);

  // Adds generated text; returns what may be sent now. After a stop string
  // is seen, stopped() is true and later calls return nothing.
  std::string push(std::string_view text);
  // The end of generation without a stop string: what was held back.
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that ended the text ("" before).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace weir
