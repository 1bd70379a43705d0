// suites/generation: see gen_util.h.
#include "suites/common/case_registry.h"
#include "suites/generation/gen_util.h"

#include "fixtures/compare.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <stdexcept>

#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "suites/reference/oracle_h5.h"

extern char** environ;

namespace mlaconf::gentest {

std::string shared_dir() {
  const char* env = std::getenv("MLACONF_SHARED_DIR");
  return env && *env ? env : MLACONF_SHARED_DIR;
}
std::string tiny_model() { return shared_dir() + "/models/glm-dsa-tiny.gguf"; }
std::string tiny_oracle() { return shared_dir() + "/models/glm-dsa-tiny.oracle.h5"; }

// The group's `text` attribute: a variable-length UTF-8 string (read with a UTF-8 memory type: HDF5
// refuses to convert it to ASCII), or a fixed-length one.
std::string read_text_attr(const std::string& file, const std::string& group) {
  std::string out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t a = f < 0 ? -1 : H5Aopen_by_name(f, ("/" + group).c_str(), "text", H5P_DEFAULT, H5P_DEFAULT);
  if (a >= 0) {
    hid_t t = H5Aget_type(a);
    if (H5Tis_variable_str(t) > 0) {
      hid_t mt = H5Tcopy(H5T_C_S1);
      H5Tset_size(mt, H5T_VARIABLE);
      H5Tset_cset(mt, H5Tget_cset(t));
      char* s = nullptr;
      if (H5Aread(a, mt, &s) >= 0 && s) out = s;
      if (s) H5free_memory(s);
      H5Tclose(mt);
    } else {
      std::vector<char> buf(H5Tget_size(t) + 1, 0);
      if (H5Aread(a, t, buf.data()) >= 0) out = buf.data();
    }
    H5Tclose(t);
    H5Aclose(a);
  }
  if (f >= 0) H5Fclose(f);
  if (out.empty()) throw std::runtime_error(file + ": no readable text attribute on group " + group);
  return out;
}

GreedyCase read_greedy_case(const std::string& oracle, const std::string& group) {
  test::H5File h(oracle);
  GreedyCase g;
  g.text = read_text_attr(oracle, group);
  g.input_ids = h.read_i32("/" + group + "/input_ids");
  g.tokens = h.read_i32("/" + group + "/tokens");
  g.margins = h.read_f64("/" + group + "/margins");
  if (g.text.empty() || g.input_ids.empty() || g.tokens.empty() || g.margins.size() != g.tokens.size())
    throw std::runtime_error(oracle + ": group " + group + " is not a greedy case (text, input_ids, tokens, margins)");
  return g;
}

std::string Judgement::summary() const {
  std::string s = std::to_string(equal) + " of " + std::to_string(compared) + " compared steps equal";
  for (const auto& n : near_ties) s += "; near-tie: " + n;
  for (const auto& f : failures) s += "; FAIL: " + f;
  return s;
}

double reference_near_tie_margin() { return fx::tolerance(fx::TolClass::ExactIds, "f32").margin; }
double cuda_near_tie_margin() { return fx::tolerance(fx::TolClass::ExactIds, "f16").margin; }

Judgement judge(const std::vector<int32_t>& got, const std::vector<double>& got_margins,
                const std::vector<int32_t>& want, const std::vector<double>& want_margins, bool same_prefix,
                double near_tie_margin) {
  const fx::TokenJudgement t = fx::judge_tokens({want.begin(), want.end()}, want_margins, {got.begin(), got.end()},
                                                near_tie_margin, same_prefix);
  Judgement j;
  j.compared = t.compared;
  j.equal = t.equal;
  auto describe = [&](int64_t i) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "step %lld: got %d (margin %.4f), truth %d (margin %.4f)", static_cast<long long>(i), got[i],
                  static_cast<size_t>(i) < got_margins.size() ? got_margins[i] : -1.0, want[i], want_margins[i]);
    return std::string(buf);
  };
  for (int64_t i : t.near_tie_steps) j.near_ties.push_back(describe(i));
  for (int64_t i : t.failed_steps) j.failures.push_back(describe(i));
  if (t.length_differs)
    j.failures.push_back("got " + std::to_string(got.size()) + " tokens, truth has " + std::to_string(want.size()));
  return j;
}

int run_process(const std::vector<std::string>& argv, std::string* out, std::string* err) {
  int po[2], pe[2];
  if (pipe(po) != 0 || pipe(pe) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, po[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
  posix_spawn_file_actions_addclose(&fa, po[0]);
  posix_spawn_file_actions_addclose(&fa, pe[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(po[1]);
  close(pe[1]);
  if (rc != 0) {
    close(po[0]);
    close(pe[0]);
    throw std::runtime_error("cannot start " + argv[0]);
  }
  pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
  std::string* sinks[2] = {out, err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) break;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[k]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::vector<double> json_numbers(const std::string& json, const std::string& key, size_t from) {
  const std::string pat = "\"" + key + "\": [";
  size_t p = json.find(pat, from);
  if (p == std::string::npos) return {};
  size_t e = json.find(']', p);
  std::string body = json.substr(p + pat.size(), e - p - pat.size());
  std::vector<double> v;
  std::regex num("[-+0-9.eE]+");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), num); it != std::sregex_iterator(); ++it)
    v.push_back(std::stod(it->str()));
  return v;
}

std::optional<std::string> json_string(const std::string& json, const std::string& key, size_t from) {
  const std::string pat = "\"" + key + "\": \"";
  size_t p = json.find(pat, from);
  if (p == std::string::npos) return std::nullopt;
  std::string s;
  for (size_t i = p + pat.size(); i < json.size(); ++i) {
    char c = json[i];
    if (c == '"') return s;
    if (c != '\\') {
      s += c;
      continue;
    }
    char e = json[++i];
    switch (e) {
      case 'n': s += '\n'; break;
      case 'r': s += '\r'; break;
      case 't': s += '\t'; break;
      case 'u': s += static_cast<char>(std::stoi(json.substr(i + 1, 4), nullptr, 16)); i += 4; break;
      default: s += e;
    }
  }
  return std::nullopt;
}

std::string json_object(const std::string& json, const std::string& key) {
  const std::string pat = "\"" + key + "\": ";
  size_t p = json.find(pat);
  if (p == std::string::npos) return "";
  p += pat.size();
  if (json.compare(p, 4, "null") == 0) return "null";
  if (json[p] != '{' && json[p] != '[') return "";
  int depth = 0;
  bool in_str = false;
  for (size_t i = p; i < json.size(); ++i) {
    char c = json[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return json.substr(p, i - p + 1);
    }
  }
  return "";
}

void copy_gguf(const std::string& in, const std::string& out, const GgufValueEdit& edit) {
  GgufFile f = GgufFile::open(in);
  GgufWriter w;
  for (const auto& [key, value] : f.metadata()) {
    bool drop = false;
    for (const auto& p : edit.drop_prefix) drop = drop || key.rfind(p, 0) == 0;
    if (drop || edit.set_int.count(key)) continue;
    w.set_value(key, value);
  }
  for (const auto& [key, v] : edit.set_int) w.set_i32(key, static_cast<int32_t>(v));
  for (const TensorInfo& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    w.add_tensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.nbytes));
  }
  w.write(out);
}

void register_case(const std::string& name, std::function<void()> body) {
  mlaconf::test::register_case("generation", name, std::move(body));
}

std::string ids_csv(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace mlaconf::gentest
