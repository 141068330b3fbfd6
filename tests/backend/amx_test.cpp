// AMX detection against the kernel's own view: /proc/cpuinfo's amx_tile,
// amx_int8 and amx_bf16 flags (what CPUID says, as Linux reports it). Where
// the CPU has the tiles, a Linux new enough to list them grants the state.
#include "backend/cpu/amx.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace weir::cpu {
namespace {

std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      for (std::string w; words >> w;) flags.insert(w);
      break;
    }
  return flags;
}

TEST(Amx, DetectionAgreesWithTheKernelsCpuFlags) {
  const std::set<std::string> f = cpuinfo_flags();
  if (f.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  const AmxSupport& a = amx_support();
  EXPECT_EQ(a.tile, f.count("amx_tile") == 1);
  EXPECT_EQ(a.int8, f.count("amx_int8") == 1);
  EXPECT_EQ(a.bf16, f.count("amx_bf16") == 1);
  if (f.count("amx_tile")) {
    EXPECT_TRUE(a.usable()) << a.describe();
  } else {
    EXPECT_FALSE(a.usable());
    EXPECT_NE(a.describe().find("none"), std::string::npos) << a.describe();
  }
  std::printf("AMX: %s\n", a.describe().c_str());
}


// The fault fallback: executing a tile instruction where there are no tiles
// (this VM) raises SIGILL, which amx_tiles_run catches and answers false;
// where AMX is usable it runs.
TEST(Amx, TileInstructionsFaultCleanlyWhereThereAreNone) {
  const std::set<std::string> f = cpuinfo_flags();
  if (f.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  if (!amx_support().usable() && f.count("amx_tile")) GTEST_SKIP() << amx_support().describe();
  EXPECT_EQ(amx_tiles_run(), f.count("amx_tile") == 1);
  EXPECT_EQ(amx_tiles_run(), f.count("amx_tile") == 1);  // the handlers put back, again
}

}  // namespace
}  // namespace weir::cpu
