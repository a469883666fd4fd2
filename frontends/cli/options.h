// Every option of the `gphash` command is declared through these helpers, which parse its value
// strictly and check it against its allowed range or choices where it is parsed: a bad value is a
// usage error (exit 2) whose message names the option and what it accepts. Each declaration is
// also recorded, so a test can walk every subcommand and option (tests/cli_options_test.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gphash::cli {

struct OptionSpec {
  enum Kind { kUnsigned, kDouble, kChoice, kText, kFlag, kFileMode };
  std::string command;  // subcommand name
  std::string name;     // "--batch"
  Kind kind = kText;
  uint64_t min = 0, max = 0;          // kUnsigned
  double dmin = 0, dmax = 0;          // kDouble: (dmin, dmax]
  std::vector<std::string> choices;   // kChoice
  bool required = false;
};

class OptionRegistry {
 public:
  // An unsigned integer in [min, max]: decimal digits only (no sign, no spaces, no suffix).
  CLI::Option* number(CLI::App* app, const std::string& name, uint64_t& value, uint64_t min, uint64_t max,
                      const std::string& help);
  CLI::Option* number(CLI::App* app, const std::string& name, uint32_t& value, uint64_t min, uint64_t max,
                      const std::string& help);
  CLI::Option* number(CLI::App* app, const std::string& name, int& value, uint64_t min, uint64_t max,
                      const std::string& help);
  CLI::Option* number(CLI::App* app, const std::string& name, std::optional<uint64_t>& value, uint64_t min,
                      uint64_t max, const std::string& help);
  // A finite decimal number in (min, max].
  CLI::Option* real(CLI::App* app, const std::string& name, double& value, double min, double max,
                    const std::string& help);
  // One of `choices`, exactly.
  CLI::Option* choice(CLI::App* app, const std::string& name, std::string& value, std::vector<std::string> choices,
                      const std::string& help);
  // Free text (a path, a key): any non-empty value.
  CLI::Option* text(CLI::App* app, const std::string& name, std::string& value, const std::string& help);
  CLI::Option* flag(CLI::App* app, const std::string& name, bool& value, const std::string& help);
  // File permissions in octal, 0..0777 (for example 0640).
  CLI::Option* file_mode(CLI::App* app, const std::string& name, uint32_t& value, const std::string& help);

  const std::vector<OptionSpec>& specs() const { return specs_; }

 private:
  CLI::Option* add_unsigned(CLI::App* app, const std::string& name, uint64_t min, uint64_t max, const std::string& help,
                            std::function<void(uint64_t)> store);
  OptionSpec& record(CLI::App* app, const std::string& name, OptionSpec::Kind kind);
  std::vector<OptionSpec> specs_;
};

// Parses `text` as an unsigned decimal in [min, max]; throws CLI::ValidationError naming `name`.
uint64_t parse_unsigned(const std::string& name, const std::string& text, uint64_t min, uint64_t max);

}  // namespace gphash::cli
