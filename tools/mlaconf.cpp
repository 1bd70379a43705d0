// mlaconf: one program, many subcommands (see `mlaconf --help`).
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/text_escape.h"
#include "tools/command.h"
#include "tools/settings.h"

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

// One error line on stderr. It holds paths and strings from files (GGUF keys, HDF5 names): escaped
// (core/text_escape.h) so that it stays one line and no byte reaches the terminal as a control sequence.
void error_line(const char* prefix, const std::string& what) {
  std::fprintf(stderr, "mlaconf: %s%s\n", prefix, escape_text(what).c_str());
}

// Whatever a command printed must have reached stdout: a full disk or a closed pipe behind `>` is a
// failure to deliver the result (exit 2), not a pass.
bool stdout_written() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int e = errno;
  const bool ok = flushed && !std::ferror(stdout) && !std::cout.fail();
  // errno is the final flush's; an earlier failed write (the error flag) left no errno to report.
  if (!ok) error_line("error: ", std::string("cannot write to standard output") +
                                     (!flushed && e ? std::string(": ") + std::strerror(e) : ""));
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
  // Usage errors: one line, the same prefix as every other error (README "Exit codes"), escaped as they are.
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    // The subcommand the error belongs to, when one was recognised: "capture: --model is required".
    std::string sub;
    for (const CLI::App* s : a->get_subcommands()) sub = s->get_name();
    const std::string where = sub.empty() ? "" : sub + ": ";
    return "mlaconf: error: " + escape_text(where + e.what()) + " (see mlaconf " + (sub.empty() ? "" : sub + " ") + "--help)\n";
  });
  app.set_version_flag("--version", "mlaconf 0.1.0");
  auto& reg = cli::registry();
  std::stable_sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (auto& e : reg) e.setup(app);
  try {
    cli::load_settings();  // the MLACONF_* overrides, read here once (tools/settings.h)
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print to stdout and exit 0: that output must have been delivered too.
    int rc = app.exit(e);
    if (rc == 0) return cli::stdout_written() ? kExitOk : kExitBadInput;
    return kExitBadInput;
  } catch (const InputError& e) {
    cli::error_line("error: ", e.what());
    return kExitBadInput;
  } catch (const NotSupported& e) {
    cli::error_line("not supported: ", e.what());
    return kExitNotSupported;
  } catch (const std::bad_alloc&) {
    cli::error_line("error: ", "out of memory");
    return kExitBadInput;
  } catch (const std::exception& e) {
    cli::error_line("internal error: ", e.what());
    return 4;
  }
  if (!cli::stdout_written()) return kExitBadInput;
  return cli::g_exit;
}
