// The main of every Catch2 test executable. Run by ctest (KILN_CATCH_XML_DIR set by kiln_test), a test
// process writes Catch2's XML report to <dir>/<executable>.<test name>.<hash>.xml, from which
// tests/tools/ctest_summary.py counts the test cases that executed assertions; the failed assertions are
// still printed on stdout, for ctest's --output-on-failure. Run by hand, it is Catch2's own main.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

bool g_xml_report = false;

// Prints each failed assertion as one block (the XML report holds the rest): source, expression, values. On
// the process's stdout: the XML reporter captures std::cout into the report.
struct FailurePrinter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  bool assertionEnded(Catch::AssertionStats const& stats) override {
    auto const& result = stats.assertionResult;
    if (!g_xml_report || result.isOk()) return true;
    std::ostringstream text;
    text << result.getSourceInfo() << ": FAILED:";
    if (result.hasExpression()) {
      text << " " << result.getExpressionInMacro() << "\n  with expansion: " << result.getExpandedExpression();
    }
    if (result.hasMessage()) text << "\n  " << result.getMessage();
    for (auto const& info : stats.infoMessages) text << "\n  with message: " << info.message;
    std::fprintf(stdout, "%s\n", text.str().c_str());
    std::fflush(stdout);
    return true;
  }
};

// A file name for the test spec: its letters and digits, and a hash of the whole to keep names apart.
std::string report_name(const std::string& executable, const std::vector<std::string>& spec) {
  std::string joined;
  for (const auto& part : spec) joined += part + "\n";
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a
  std::string clean;
  for (unsigned char c : joined) {
    hash = (hash ^ c) * 1099511628211ull;
    if (clean.size() < 80) clean += std::isalnum(c) ? static_cast<char>(c) : '_';
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  const auto slash = executable.find_last_of('/');
  return executable.substr(slash == std::string::npos ? 0 : slash + 1) + "." + clean + "." + hex + ".xml";
}

}  // namespace

CATCH_REGISTER_LISTENER(FailurePrinter)

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  auto& config = session.configData();
  const char* dir = std::getenv("KILN_CATCH_XML_DIR");
  // Only a plain run of named test cases (what ctest runs), never a listing or another reporter asked for.
  if (dir != nullptr && *dir != '\0' && config.outputFilename.empty() && config.reporterName == "console" &&
      !config.listTests && !config.listTestNamesOnly && !config.listTags && !config.listReporters &&
      !config.testsOrTags.empty()) {
    ::mkdir(dir, 0755);  // ctest's first test makes it; an error shows when Catch2 cannot open the file
    config.reporterName = "xml";
    config.outputFilename = std::string(dir) + "/" + report_name(argv[0], config.testsOrTags);
    g_xml_report = true;
  }
  return session.run();
}
