// mlaconf CLI: the subcommand registry.
//
// Each subcommand lives in its own tools/cmd_<name>.cpp and registers itself with a static
// CommandRegistration; main() builds the CLI11 app from the registry. A subcommand's callback returns
// through set_exit_code(): 0 pass, 1 fail, 2 bad input, 3 not supported (see core/error.h).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace mlaconf::cli {

using CommandSetup = std::function<void(CLI::App& root)>;

struct CommandRegistration {
  // `order` sorts `--help` (inspect 10, synth 20, tokenize 25, generate 30, capture 40, compare 50, bench 60).
  CommandRegistration(int order, CommandSetup setup);
};

void set_exit_code(int code);

// For options whose empty value reads as "not given" (a path, a case name): `--json ""` (an unset shell
// variable) once wrote no report and exited 0, `--force-decisions ""` captured without forcing. Given,
// such an option must hold something; CLI11 reports it as a usage error (exit 2, one line).
inline const CLI::Validator& non_empty() {
  static const CLI::Validator v([](std::string& s) { return s.empty() ? std::string("empty value") : std::string(); }, "");
  return v;
}

}  // namespace mlaconf::cli
