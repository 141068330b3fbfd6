// weir serve in a build without nlohmann-json or cpp-httplib.
#include "core/error.h"
#include "tools/commands.h"

namespace weir::tools {

int cmd_serve(int, char**) {
  throw Error("this weir was built without the server: install nlohmann-json3-dev and libcpp-httplib-dev "
              "(scripts/setup.sh does) and build again");
}

}  // namespace weir::tools
