// mlaconf compare EXPECTED.h5 ACTUAL.h5 [--json R.json] [--plot R.png] [--filter CASE] [--precision P]
//                 [--bounds B.json]
//
// Exit 0: every judged dataset within its tolerance; 1: at least one fails (or, with --require-all,
// EXPECTED holds a dataset ACTUAL lacks); 2: unusable input (unreadable or truncated file, another
// schema version, fixtures of two different models, a case kind SCHEMA.md does not define, a missing
// or mis-typed dataset, no case or dataset in common, an output that is an input).
// Datasets EXPECTED holds and ACTUAL lacks are never silently skipped: they are listed as "not judged"
// and counted in the summary line and the JSON.
#include <cstdio>
#include <iostream>
#include <memory>

#include "core/error.h"
#include "core/atomic_file.h"
#include "fixtures/compare.h"
#include "fixtures/first_failure.h"
#include "tools/command.h"
#include "tools/text_file.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct CompareArgs {
  std::string expected, actual, json, plot, filter, precision, bounds;
  bool brief = false, require_all = false;
  bool no_attribution = false;
};

CommandRegistration reg(50, [](CLI::App& root) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* c = root.add_subcommand("compare", "Judge ACTUAL against EXPECTED fixture, dataset by dataset (exit 0 pass, 1 fail, 2 unusable)");
  c->add_option("expected", a->expected, "expected fixture (.h5): an mlaconf capture or the oracle")->required();
  c->add_option("actual", a->actual, "actual fixture (.h5) to judge")->required();
  c->add_option("--json", a->json, "write the report as JSON here")->check(non_empty());
  c->add_option("--plot", a->plot, "write a PNG here: log10(NMSE) per layer, one panel per op class, the bound, the first failing op named")
      ->check(non_empty());
  c->add_option("--filter", a->filter, "judge only this case (canonical name, expected or actual)")->check(non_empty());
  c->add_option("--precision", a->precision,
                 "tolerances for this precision (a built-in one: f64, f32, f16, bf16, fp8, llamacpp-cpu; or a class --bounds declares) instead of ACTUAL's");
  c->add_option("--bounds", a->bounds,
                "declared bounds (JSON, docs/TOLERANCES.md): precision classes of your own, and a precision per dataset")
      ->check(non_empty());
  c->add_flag("--brief", a->brief, "print only failing datasets and the summary");
  c->add_flag("--no-attribution", a->no_attribution,
              "judge every row, also those a differing decision (a near-tie flip) reached (default: decision-aware)");
  c->add_flag("--require-all", a->require_all, "fail (exit 1) when EXPECTED holds a dataset ACTUAL lacks (not judged)");
  c->callback([a] {
    require_regular_file(a->expected, "EXPECTED");
    require_regular_file(a->actual, "ACTUAL");
    if (!a->json.empty()) require_output_path(a->json, "--json", {a->expected, a->actual});
    if (!a->plot.empty()) require_output_path(a->plot, "--plot", {a->expected, a->actual});
    require_distinct_outputs(a->json, "--json", a->plot, "--plot");
    fx::CompareOptions o;
    if (!a->bounds.empty()) o.bounds = fx::DeclaredBounds::parse(read_text_file(a->bounds, "--bounds"), a->bounds);
    if (!a->precision.empty() && !o.bounds.classes.count(a->precision) && !fx::is_builtin_precision(a->precision))
      throw InputError("--precision " + a->precision + ": not a built-in precision (" + fx::builtin_precisions_text() +
                       ") nor a class of --bounds");
    o.filter = a->filter;
    o.precision = a->precision;
    o.attribution = !a->no_attribution;
    o.require_all = a->require_all;
    fx::CompareReport r = fx::compare_files(a->expected, a->actual, o);
    std::cout << fx::report_table(r, a->brief);
    if (!r.pass()) std::cout << "first failure: " << fx::first_failure_text(r) << "\n";
    if (!a->json.empty()) {
      write_file_atomic(a->json, fx::report_json(r));
    }
    if (!a->plot.empty()) std::cout << fx::write_report_png(r, a->plot);
    set_exit_code(r.pass() ? kExitOk : kExitFail);
  });
});

}  // namespace
}  // namespace mlaconf::cli
