#include "options.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

namespace gphash::cli {
namespace {

std::string range_text(uint64_t min, uint64_t max) {
  return max == std::numeric_limits<uint64_t>::max() ? fmt::format("{}..2^64-1", min) : fmt::format("{}..{}", min, max);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

uint64_t parse_unsigned(const std::string& name, const std::string& text, uint64_t min, uint64_t max) {
  const std::string want = fmt::format("takes an integer in {}", range_text(min, max));
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    throw CLI::ValidationError(name, fmt::format("{}, not '{}'", want, text));
  uint64_t v = 0;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (err == std::errc::result_out_of_range || v < min || v > max)
    throw CLI::ValidationError(name, fmt::format("{}; {} is out of range", want, text));
  if (err != std::errc() || end != text.data() + text.size())
    throw CLI::ValidationError(name, fmt::format("{}, not '{}'", want, text));
  return v;
}

OptionSpec& OptionRegistry::record(CLI::App* app, const std::string& name, OptionSpec::Kind kind) {
  OptionSpec s;
  s.command = app->get_name();
  // "-o,--output" is recorded (and tested) by its long name.
  const auto long_name = name.find("--");
  s.name = name.find(',') != std::string::npos && long_name != std::string::npos ? name.substr(long_name) : name;
  s.kind = kind;
  specs_.push_back(std::move(s));
  return specs_.back();
}

CLI::Option* OptionRegistry::add_unsigned(CLI::App* app, const std::string& name, uint64_t min, uint64_t max,
                                          const std::string& help, std::function<void(uint64_t)> store) {
  OptionSpec& s = record(app, name, OptionSpec::kUnsigned);
  s.min = min;
  s.max = max;
  auto* o = app->add_option_function<std::string>(
      name, [=](const std::string& text) { store(parse_unsigned(name, text, min, max)); },
      fmt::format("{} ({})", help, range_text(min, max)));
  o->type_name("N");
  return o;
}

CLI::Option* OptionRegistry::number(CLI::App* app, const std::string& name, uint64_t& value, uint64_t min, uint64_t max,
                                    const std::string& help) {
  return add_unsigned(app, name, min, max, help, [&value](uint64_t v) { value = v; });
}
CLI::Option* OptionRegistry::number(CLI::App* app, const std::string& name, uint32_t& value, uint64_t min, uint64_t max,
                                    const std::string& help) {
  return add_unsigned(app, name, min, std::min<uint64_t>(max, UINT32_MAX), help,
                      [&value](uint64_t v) { value = static_cast<uint32_t>(v); });
}
CLI::Option* OptionRegistry::number(CLI::App* app, const std::string& name, int& value, uint64_t min, uint64_t max,
                                    const std::string& help) {
  return add_unsigned(app, name, min, std::min<uint64_t>(max, INT32_MAX), help,
                      [&value](uint64_t v) { value = static_cast<int>(v); });
}
CLI::Option* OptionRegistry::number(CLI::App* app, const std::string& name, std::optional<uint64_t>& value,
                                    uint64_t min, uint64_t max, const std::string& help) {
  return add_unsigned(app, name, min, max, help, [&value](uint64_t v) { value = v; });
}

CLI::Option* OptionRegistry::real(CLI::App* app, const std::string& name, double& value, double min, double max,
                                  const std::string& help) {
  OptionSpec& s = record(app, name, OptionSpec::kDouble);
  s.dmin = min;
  s.dmax = max;
  auto* o = app->add_option_function<std::string>(
      name,
      [=, &value](const std::string& text) {
        const std::string want = fmt::format("takes a number in ({}, {}]", min, max);
        double v = 0;
        const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || err != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
          throw CLI::ValidationError(name, fmt::format("{}, not '{}'", want, text));
        if (!(v > min && v <= max)) throw CLI::ValidationError(name, fmt::format("{}; {} is out of range", want, text));
        value = v;
      },
      fmt::format("{} (in ({}, {}])", help, min, max));
  o->type_name("X");
  return o;
}

CLI::Option* OptionRegistry::choice(CLI::App* app, const std::string& name, std::string& value,
                                    std::vector<std::string> choices, const std::string& help) {
  OptionSpec& s = record(app, name, OptionSpec::kChoice);
  s.choices = choices;
  auto* o = app->add_option_function<std::string>(
      name,
      [=, &value](const std::string& text) {
        for (const std::string& c : choices)
          if (c == text) {
            value = text;
            return;
          }
        throw CLI::ValidationError(name, fmt::format("takes one of {}, not '{}'", join(choices), text));
      },
      fmt::format("{}: {}", help, join(choices)));
  o->type_name("WORD");
  return o;
}

CLI::Option* OptionRegistry::text(CLI::App* app, const std::string& name, std::string& value, const std::string& help) {
  record(app, name, OptionSpec::kText);
  return app->add_option_function<std::string>(
      name,
      [=, &value](const std::string& text) {
        if (text.empty()) throw CLI::ValidationError(name, "needs a non-empty value");
        value = text;
      },
      help);
}

CLI::Option* OptionRegistry::flag(CLI::App* app, const std::string& name, bool& value, const std::string& help) {
  record(app, name, OptionSpec::kFlag);
  return app->add_flag(name, value, help);
}

CLI::Option* OptionRegistry::file_mode(CLI::App* app, const std::string& name, uint32_t& value, const std::string& help) {
  record(app, name, OptionSpec::kFileMode);
  auto* o = app->add_option_function<std::string>(
      name,
      [=, &value](const std::string& text) {
        unsigned v = 0;
        const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v, 8);
        if (text.empty() || text.size() > 4 || err != std::errc() || end != text.data() + text.size() || v > 0777)
          throw CLI::ValidationError(name, fmt::format("takes permissions in octal, 0..0777 (like 0600), not '{}'", text));
        value = v;
      },
      help + " (octal, like 0640)");
  o->type_name("MODE");
  return o;
}

}  // namespace gphash::cli
