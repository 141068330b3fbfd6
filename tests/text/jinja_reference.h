// Compares weir's Jinja engine with Python's jinja2, the reference:
// tests/text/jinja_reference.py renders every case of a suite in one
// python3 run (the environment Hugging Face's apply_chat_template uses), and
// each case must render to the same bytes here, or fail in both.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "json_lite.h"
#include "test_env.h"
#include "text/jinja/template.h"

#ifndef WEIR_JINJA_REFERENCE  // set by tests/CMakeLists.txt
#define WEIR_JINJA_REFERENCE "tests/text/jinja_reference.py"
#endif

namespace weir::test {

struct JinjaCase {
  std::string name;      // unique within a suite
  std::string source;    // the template
  std::string context = "{}";  // JSON object: the variables
};

struct JinjaResult {
  bool ok = false;
  std::string output;  // ok
  std::string error;   // !ok
};

inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

// Shows text with its control characters visible, for failure messages.
inline std::string visible(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out.push_back(static_cast<char>(c));
  }
  return out;
}

// Renders every case with jinja2 in one python3 run. Fails the current test
// (and returns nothing) when python3 or jinja2 is missing: scripts/setup.sh
// installs them.
inline std::map<std::string, JinjaResult> render_with_jinja2(const std::vector<JinjaCase>& cases) {
  std::string input = "[";
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i) input += ",\n";
    input += "{\"template\": " + json_quote(cases[i].source) + ", \"context\": " + cases[i].context + "}";
  }
  input += "]";
  const std::string in_path = process_dir() + "/jinja-cases-" + std::to_string(std::hash<std::string>{}(input)) + ".json";
  {
    std::ofstream f(in_path, std::ios::binary);
    f << input;
  }
  const std::string cmd = "'" + python() + "' '" + WEIR_JINJA_REFERENCE + "' < '" + in_path + "' 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "cannot run " << cmd;
    return {};
  }
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  if (status != 0) {
    ADD_FAILURE() << "the jinja2 reference failed (python3 with jinja2 is needed: scripts/setup.sh installs it):\n"
                  << cmd << "\n" << out.substr(0, 4000);
    return {};
  }
  std::map<std::string, JinjaResult> results;
  const json::Value doc = json::parse(out);
  if (doc.size() != cases.size()) {
    ADD_FAILURE() << "the jinja2 reference gave " << doc.size() << " results for " << cases.size() << " cases";
    return {};
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    JinjaResult r;
    r.ok = doc[i]["ok"].as_bool();
    if (r.ok) r.output = doc[i]["output"].as_string();
    else r.error = doc[i]["error"].as_string();
    if (!results.emplace(cases[i].name, r).second) ADD_FAILURE() << "two cases are named " << cases[i].name;
  }
  return results;
}

// Renders `c` here and expects what jinja2 gave: the same bytes, or an
// error in both. Returns whether they agree.
inline bool expect_same_as_jinja2(const JinjaCase& c, const JinjaResult& want) {
  std::string got;
  std::string error;
  try {
    jinja::Options o;
    o.name = c.name;
    const jinja::Template t(c.source, o);
    got = t.render(jinja::value_from_json(c.context));
  } catch (const Error& e) {
    error = e.what();
  }
  if (want.ok && !error.empty()) {
    ADD_FAILURE() << c.name << ": jinja2 rendered it, weir failed: " << error << "\ntemplate:\n"
                  << visible(c.source) << "\njinja2 gave:\n" << visible(want.output);
    return false;
  }
  if (!want.ok && error.empty()) {
    ADD_FAILURE() << c.name << ": jinja2 failed (" << want.error << "), weir rendered:\n" << visible(got)
                  << "\ntemplate:\n" << visible(c.source);
    return false;
  }
  if (want.ok && got != want.output) {
    ADD_FAILURE() << c.name << ": differs from jinja2\ntemplate:\n" << visible(c.source) << "\njinja2:\n"
                  << visible(want.output) << "\nweir:\n" << visible(got);
    return false;
  }
  return true;
}

}  // namespace weir::test
