#include "backend/cpu/numa_topology.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace weir::cpu {
namespace {

namespace fs = std::filesystem;

bool read_text(const fs::path& p, std::string* out) {
  std::ifstream in(p);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

int parse_int(std::string_view s, std::string_view whole) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || v < 0)
    throw Error("cpulist '" + std::string(whole) + "': '" + std::string(s) + "' is not a CPU number");
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

}  // namespace

std::vector<int> parse_cpulist(std::string_view whole) {
  std::vector<int> cpus;
  std::string_view s = trim(whole);
  while (!s.empty()) {
    const size_t comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    const size_t dash = item.find('-');
    const int a = parse_int(item.substr(0, dash), whole);
    const int b = dash == std::string_view::npos ? a : parse_int(item.substr(dash + 1), whole);
    if (b < a || b - a > (1 << 16))
      throw Error("cpulist '" + std::string(whole) + "': bad range '" + std::string(item) + "'");
    for (int c = a; c <= b; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpulist(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

int NumaTopology::node_of_cpu(int cpu) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (std::binary_search(nodes[i].cpus.begin(), nodes[i].cpus.end(), cpu)) return int(i);
  return -1;
}

int NumaTopology::n_usable_nodes() const {
  return int(std::count_if(nodes.begin(), nodes.end(), [](const NumaNode& n) { return !n.usable.empty(); }));
}

NumaTopology NumaTopology::read(const std::string& root, const std::vector<int>& allowed) {
  NumaTopology t;
  const fs::path dir(root);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    t.nodes.push_back({0, allowed, allowed});
    t.distance = {{10}};
    return t;
  }
  t.from_sysfs = true;
  // Node ids: the "online" list where there is one (its order is the order of
  // the distance columns), else every nodeN directory.
  std::vector<int> ids;
  std::string text;
  if (read_text(dir / "online", &text)) {
    ids = parse_cpulist(text);
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 4 && name.compare(0, 4, "node") == 0 &&
          name.find_first_not_of("0123456789", 4) == std::string::npos)
        ids.push_back(std::stoi(name.substr(4)));
    }
    std::sort(ids.begin(), ids.end());
  }
  for (int id : ids) {
    const fs::path nd = dir / ("node" + std::to_string(id));
    NumaNode n;
    n.id = id;
    const fs::path cl = nd / "cpulist";
    if (read_text(cl, &text)) {
      try {
        n.cpus = parse_cpulist(text);
      } catch (const Error& e) {
        throw Error(cl.string() + ": " + e.what());
      }
    }
    std::set_intersection(n.cpus.begin(), n.cpus.end(), allowed.begin(), allowed.end(),
                          std::back_inserter(n.usable));
    t.nodes.push_back(std::move(n));
  }
  if (t.nodes.empty()) {  // an empty tree: treat as no tree
    t.nodes.push_back({0, allowed, allowed});
    t.from_sysfs = false;
  }
  // Distances; a missing or short file leaves 10 on the diagonal, 20 elsewhere.
  const size_t n = t.nodes.size();
  t.distance.assign(n, std::vector<int>(n, 20));
  for (size_t i = 0; i < n; ++i) {
    t.distance[i][i] = 10;
    const fs::path df = dir / ("node" + std::to_string(t.nodes[i].id)) / "distance";
    if (!read_text(df, &text)) continue;
    std::istringstream in(text);
    std::vector<int> row;
    for (int d; in >> d;) row.push_back(d);
    if (!in.eof()) throw Error(df.string() + ": expected distances (numbers), got '" + std::string(trim(text)) + "'");
    if (row.size() != n)
      throw Error(df.string() + ": " + std::to_string(row.size()) + " distances for " + std::to_string(n) + " nodes");
    t.distance[i] = row;
  }
  return t;
}

NumaTopology NumaTopology::system() { return read("/sys/devices/system/node", affinity_cpus()); }

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

int set_affinity(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (CPU_COUNT(&set) == 0) return EINVAL;
  return sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : errno;
}

}  // namespace weir::cpu
