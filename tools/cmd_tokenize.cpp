// mlaconf tokenize: text -> token ids with the GGUF's own tokenizer (tokenizer.ggml.*).
//
//   mlaconf tokenize --model M.gguf --text "Hello world"           -> 9707 1879
//   mlaconf tokenize --model M.gguf --text "Hello" --json          -> {"ids": [9707]}
//   mlaconf tokenize --model M.gguf --text "Hello" --add-bos       -> bos id first
//   mlaconf tokenize --model M.gguf --ids "9707 1879" [--json]     -> the decoded text
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "core/json.h"
#include "tools/command.h"
#include "tools/text_file.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct TokenizeOpts {
  std::string model;
  std::string text;
  std::string text_file;
  std::string ids;
  bool json = false;
  bool add_bos = false;
  bool no_special = false;
  bool pieces = false;
};

int32_t token_id(long long v, const std::string& shown) {
  if (v < 0 || v > INT32_MAX) throw InputError("--ids: " + shown + " is not a token id");
  return static_cast<int32_t>(v);
}

// "[1, 2, 3]" is read as JSON (a list of integers, nothing else); "1 2 3" and "1,2,3" as a plain list.
std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  const size_t first = s.find_first_not_of(" \t\n\r");
  if (first != std::string::npos && s[first] == '[') {
    const Json j = json_parse(s, "--ids");
    if (!j.is_array()) throw InputError("--ids: not a JSON list of token ids");
    for (const Json& x : j) {
      if (!x.is_number_integer()) throw InputError("--ids: " + x.dump() + " is not a token id");
      ids.push_back(token_id(x.get<long long>(), x.dump()));
    }
  } else {
    std::string cur;
    bool after_comma = false;
    auto flush = [&](bool comma) {
      if (cur.empty()) {
        if (comma || after_comma) throw InputError("--ids: an empty entry in '" + s + "'");
        return;
      }
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(cur, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != cur.size()) throw InputError("--ids: '" + cur + "' is not a token id");
      ids.push_back(token_id(v, "'" + cur + "'"));
      cur.clear();
    };
    for (char c : s) {
      if (c == ',') {
        flush(true);
        after_comma = true;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        if (!cur.empty()) {
          flush(false);
          after_comma = false;
        }
      } else {
        cur += c;
        after_comma = false;
      }
    }
    flush(false);
  }
  if (ids.empty()) throw InputError("--ids: no token id given");
  return ids;
}

void run(const TokenizeOpts& o) {
  tok::Tokenizer t = tok::Tokenizer::from_gguf_path(o.model);
  if (!o.ids.empty()) {
    std::vector<int32_t> ids = parse_ids(o.ids);
    std::string text = t.decode(ids, {.special = !o.no_special});
    if (o.json)
      std::cout << json_text(Json{{"text", text}}, -1) << "\n";
    else
      std::cout << text << "\n";
    return;
  }
  std::string text = o.text;
  if (!o.text_file.empty()) text = read_text_file(o.text_file, "--text-file");
  std::vector<int32_t> ids = t.encode(text, {.add_bos = o.add_bos, .parse_special = !o.no_special});
  if (o.json) {
    Json j = {{"ids", ids}};
    if (o.pieces) {
      Json pieces = Json::array();
      for (int32_t id : ids) pieces.push_back(t.token_text(id));
      j["pieces"] = std::move(pieces);
    }
    std::cout << json_text(j, -1) << "\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i) {
      std::cout << (i ? " " : "") << ids[i];
      if (o.pieces) std::cout << ":" << t.token_text(ids[i]);
    }
    std::cout << "\n";
  }
}

CommandRegistration reg(25, [](CLI::App& root) {
  auto o = std::make_shared<TokenizeOpts>();
  CLI::App* cmd = root.add_subcommand(
      "tokenize",
      "Text to token ids with the model's own tokenizer (byte-level BPE from tokenizer.ggml.*), or ids back "
      "to text with --ids. Ids are printed space-separated; --json prints {\"ids\": [...]}. No bos unless "
      "--add-bos. Special tokens written in the text (\"<|user|>\") become their ids unless --no-special. "
      "Invalid UTF-8 is read as U+FFFD.");
  cmd->add_option("--model,-m", o->model, "GGUF file (any shard of a split model)")->required();
  auto* text = cmd->add_option("--text,-t", o->text, "the text to tokenize");
  auto* file = cmd->add_option("--text-file", o->text_file, "read the text from this file (bytes as they are)")->check(non_empty());
  auto* ids = cmd->add_option("--ids", o->ids, "decode these ids instead (\"1 2 3\" or \"[1, 2, 3]\")");
  text->excludes(file)->excludes(ids);
  file->excludes(ids);
  cmd->add_flag("--json", o->json, "print JSON: {\"ids\": [...]} (or {\"text\": ...} with --ids)");
  cmd->add_flag("--add-bos", o->add_bos, "prepend tokenizer.ggml.bos_token_id");
  cmd->add_flag("--no-special", o->no_special,
                "treat control-token text as plain text (encode) / leave control tokens out (decode)");
  cmd->add_flag("--pieces", o->pieces, "also show each token's vocabulary spelling");
  cmd->callback([o, text, file, ids] {
    if (text->count() == 0 && file->count() == 0 && ids->count() == 0)
      throw InputError("tokenize: give --text, --text-file or --ids");
    require_regular_file(o->model, "--model");
    run(*o);
    set_exit_code(kExitOk);
  });
});

}  // namespace
}  // namespace mlaconf::cli
