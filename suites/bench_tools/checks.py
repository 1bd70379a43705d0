"""The bench_tools tests' bookkeeping: collect failed checks, print them, and give the exit code (0 pass, 1 fail)."""


class Checks:
    def __init__(self, name):
        self.name, self.failures = name, []

    def check(self, cond, what):
        if not cond:
            self.failures.append(what)

    def finish(self):
        for f in self.failures:
            print("FAIL:", f)
        print(f"{self.name}:", "ok" if not self.failures else f"{len(self.failures)} failure(s)")
        return 1 if self.failures else 0
