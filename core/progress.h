// mlaconf: the one progress bar on stderr, for long commands (capture's passes, the fixture writer).
//
// Shown only where someone watches: when stderr is a terminal (isatty), unless the command says
// otherwise (--quiet: never; --progress: also into a pipe or log file). On a terminal it is one line
// redrawn with '\r' at most 10 times a second; into a file it writes a plain line per phase, per 10%
// step and, while work moves, at least every kLogEvery, never a '\r'. Work comes in phases ("run",
// "write"), each with its own total in any unit.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mlaconf {

enum class ProgressMode { Auto, Always, Never };

class ProgressBar {
 public:
  ProgressBar(std::string label, ProgressMode mode)
      : label_(std::move(label)),
        tty_(::isatty(::fileno(stderr)) == 1),
        on_(mode == ProgressMode::Always || (mode == ProgressMode::Auto && tty_)),
        t0_(std::chrono::steady_clock::now()) {}
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool shown() const { return on_; }

  // Starts a phase of `total` units (e.g. "run": passes x layers; "write": dataset elements).
  void phase(const std::string& name, int64_t total) {
    phase_ = name;
    total_ = std::max<int64_t>(total, 1);
    done_ = 0;
    last_step_ = -1;
    draw("", true);
  }
  // `n` more units of the current phase are done; `what` says which.
  void advance(int64_t n, const std::string& what) { at(done_ + n, what); }
  // `done` units of the current phase are done (never moves back).
  void at(int64_t done, const std::string& what) {
    done_ = std::clamp(done, done_, total_);
    draw(what, done_ == total_);
  }
  // Ends the line (idempotent).
  void finish() {
    if (on_ && tty_ && drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  void draw(const std::string& what, bool force) {
    if (!on_) return;
    auto now = std::chrono::steady_clock::now();
    int pct = static_cast<int>(100 * done_ / total_);
    double s = std::chrono::duration<double>(now - t0_).count();
    if (tty_) {
      if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
      int fill = pct * 30 / 100;
      std::fprintf(stderr, "\r%s %-5s [%s%s] %3d%% %6.1fs %-44.44s", label_.c_str(), phase_.c_str(), std::string(fill, '#').c_str(),
                   std::string(30 - fill, '.').c_str(), pct, s, what.c_str());
      drawn_ = true;
    } else {
      int step = pct / 10;
      const bool moved = done_ != logged_done_ && now - last_draw_ >= kLogEvery;
      if (step == last_step_ && !moved) return;
      last_step_ = step;
      logged_done_ = done_;
      std::fprintf(stderr, "%s %s %3d%% %.1fs %s\n", label_.c_str(), phase_.c_str(), pct, s, what.c_str());
    }
    std::fflush(stderr);
    last_draw_ = now;
  }

  static constexpr std::chrono::seconds kLogEvery{5};
  std::string label_, phase_;
  bool tty_, on_, drawn_ = false;
  int64_t total_ = 1, done_ = 0, logged_done_ = -1;
  int last_step_ = -1;
  std::chrono::steady_clock::time_point t0_, last_draw_{};
};

}  // namespace mlaconf
