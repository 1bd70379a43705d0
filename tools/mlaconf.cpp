// mlaconf: one program, many subcommands (see `mlaconf --help`).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "tools/command.h"

namespace mlaconf::cli {
namespace {
struct Entry {
  int order;
  CommandSetup setup;
};
std::vector<Entry>& registry() {
  static std::vector<Entry> r;
  return r;
}
int g_exit = kExitOk;

// Whatever a command printed must have reached stdout: a full disk or a closed pipe behind `>` is a
// failure to deliver the result (exit 2), not a pass.
bool stdout_written() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int e = errno;
  const bool ok = flushed && !std::ferror(stdout) && !std::cout.fail();
  // errno is the final flush's; an earlier failed write (the error flag) left no errno to report.
  if (!ok) {
    const std::string why = !flushed && e ? std::string(": ") + std::strerror(e) : "";
    std::fprintf(stderr, "mlaconf: error: cannot write to standard output%s\n", why.c_str());
  }
  return ok;
}
}  // namespace

CommandRegistration::CommandRegistration(int order, CommandSetup setup) { registry().push_back({order, std::move(setup)}); }
void set_exit_code(int code) { g_exit = code; }

}  // namespace mlaconf::cli

int main(int argc, char** argv) {
  using namespace mlaconf;
  CLI::App app{
      "mlaconf: reference-vs-optimized conformance for the GLM-5 (glm-dsa) attention stack.\n"
      "MLA, the DSA lightning indexer, MoE and GGUF dequantization: a CPU reference, a CUDA pipeline,\n"
      "and HDF5 fixtures any implementation can answer. Exit codes: 0 pass, 1 fail, 2 bad input,\n"
      "3 not supported, 130/143 interrupted (SIGINT/SIGTERM; no partial file is left).",
      "mlaconf"};
  install_interrupt_cleanup();  // SIGINT/SIGTERM: remove temporary files, exit 130/143
  app.require_subcommand(1);
  // Usage errors: one line, the same prefix as every other error (README "Exit codes").
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    std::string m = e.what();
    for (char& ch : m)
      if (ch == '\n' || ch == '\r') ch = ' ';
    // The subcommand the error belongs to, when one was recognised: "capture: --model is required".
    std::string sub;
    for (const CLI::App* s : a->get_subcommands()) sub = s->get_name();
    return "mlaconf: error: " + (sub.empty() ? "" : sub + ": ") + m + " (see mlaconf " + (sub.empty() ? "" : sub + " ") + "--help)\n";
  });
  app.set_version_flag("--version", "mlaconf 0.1.0");
  auto& reg = cli::registry();
  std::stable_sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (auto& e : reg) e.setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitBadInput;
  } catch (const InputError& e) {
    std::fprintf(stderr, "mlaconf: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const NotSupported& e) {
    std::fprintf(stderr, "mlaconf: not supported: %s\n", e.what());
    return kExitNotSupported;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mlaconf: error: out of memory\n");
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlaconf: internal error: %s\n", e.what());
    return 4;
  }
  if (!cli::stdout_written()) return kExitBadInput;
  return cli::g_exit;
}
