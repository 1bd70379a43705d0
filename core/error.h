// mlaconf: errors that carry a user-facing message.
//
// Every problem with user input (a damaged GGUF, a fixture of another schema version, a wrong shape)
// is raised as InputError. The CLI turns it into one line on stderr and exit code 2; nothing in the
// project should crash or silently continue on bad input.
#pragma once
#include <stdexcept>
#include <string>

namespace mlaconf {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What this build or machine cannot do (no CUDA device, YaRN in the CUDA pipeline, ...). The CLI prints
// "mlaconf: not supported: <what>" and exits 3. Deliberately not an InputError: the input is fine.
class NotSupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFail = 1;        // a check ran and failed (compare, generation check)
inline constexpr int kExitBadInput = 2;    // unusable input: bad file, bad arguments
inline constexpr int kExitNotSupported = 3;  // e.g. --backend cuda without a CUDA device

}  // namespace mlaconf
