// Every option of every `gphash` subcommand, given bad values: each must be a usage error
// (status 2) whose message names the option, and each good boundary value must parse. The walk
// goes over CLI11's own list of options, so an option declared without a range is caught too.
#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace gphash::cli {
namespace {

struct Parsed {
  int status;
  std::string message;
};

// Parses `gphash <command> <positionals> <required options> <name> <value>` with a fresh command
// line; positionals (POOL, KEY, ...) other than the one under test get a placeholder.
Parsed parse(const std::string& command, const std::string& name, const std::string& value) {
  Cli reference;
  std::vector<std::string> args = {"gphash", command};
  for (const OptionSpec& s : reference.registry().specs())
    if (s.command == command && s.name[0] != '-') args.push_back(s.name == name ? value : "placeholder");
  if (command == "load" && name != "--records") args.insert(args.end(), {"--records", "1"});
  if (command == "run" && name != "--workload") args.insert(args.end(), {"--workload", "a"});
  if (name[0] == '-') {
    args.push_back(name);
    args.push_back(value);
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  Cli cli;
  std::ostringstream out, err;
  const int status = cli.parse(static_cast<int>(argv.size()), argv.data(), out, err);
  return {status, err.str()};
}

std::string u64(uint64_t v) { return std::to_string(v); }

std::vector<std::string> bad_unsigned(const OptionSpec& s) {
  std::vector<std::string> v = {"-1", "18446744073709551616", "99999999999999999999999", "abc", "", "1.5",
                                " 1", "0x10", "1e3", "+1"};
  if (s.min > 0) v.push_back(u64(s.min - 1));
  if (s.max < std::numeric_limits<uint64_t>::max()) v.push_back(u64(s.max + 1));
  if (s.max < (uint64_t{1} << 63)) v.push_back("9223372036854775808");
  return v;
}

TEST(CliOptions, EveryOptionOfEverySubcommandIsDeclaredWithItsRange) {
  Cli cli;
  int walked = 0;
  for (const CLI::App* sub : cli.app().get_subcommands([](const CLI::App*) { return true; })) {
    for (const CLI::Option* o : sub->get_options()) {
      if (o->get_name() == "--help" || o->get_name() == "-h,--help") continue;
      std::string name = o->get_lnames().empty() ? o->get_name() : "--" + o->get_lnames()[0];
      if (name == "--help") continue;
      bool declared = false;
      for (const OptionSpec& s : cli.registry().specs()) declared |= s.command == sub->get_name() && s.name == name;
      EXPECT_TRUE(declared) << sub->get_name() << " " << name << " was added without the option registry";
      ++walked;
    }
  }
  EXPECT_GT(walked, 40);
}

TEST(CliOptions, BadValuesAreUsageErrorsNamingTheOption) {
  Cli reference;
  int cases = 0;
  for (const OptionSpec& s : reference.registry().specs()) {
    std::vector<std::string> bad, good;
    switch (s.kind) {
      case OptionSpec::kUnsigned:
        bad = bad_unsigned(s);
        good = {u64(s.min), u64(s.max)};
        break;
      case OptionSpec::kDouble:
        bad = {"nan", "inf", "-1", "abc", "", "1,5", std::to_string(s.dmin), std::to_string(s.dmax * 2)};
        good = {std::to_string(s.dmax)};
        break;
      case OptionSpec::kChoice:
        bad = {"bogus", "", s.choices.front() + "x", " " + s.choices.front()};
        good = s.choices;
        break;
      case OptionSpec::kFileMode:
        bad = {"-1", "0888", "01000", "abc", "", "99999"};
        good = {"0600", "0640", "0"};
        break;
      case OptionSpec::kText:
        bad = {""};
        break;
      case OptionSpec::kFlag:
        continue;
    }
    if (s.name == "--devices") {
      bad.insert(bad.end(), {"a", "0,", ",0", "0,,1", "-1", "1024", "0;1"});
      good = {"0", "0,1", "0,0,0,0"};
    }
    if (s.name == "--workloads") {
      bad.insert(bad.end(), {"a,b", "load,e", "load,,a", "load,a,", "load,zz"});
      good = {"load", "load,a,b,c,d,f"};
    }
    for (const std::string& value : bad) {
      const Parsed p = parse(s.command, s.name, value);
      ++cases;
      EXPECT_EQ(p.status, 2) << s.command << " " << s.name << " '" << value << "' was accepted";
      if (s.name[0] == '-') {
        EXPECT_NE(p.message.find(s.name), std::string::npos)
            << s.command << " " << s.name << " '" << value << "': the message does not name the option: " << p.message;
      }
    }
    for (const std::string& value : good) {
      const Parsed p = parse(s.command, s.name, value);
      ++cases;
      EXPECT_EQ(p.status, 0) << s.command << " " << s.name << " '" << value << "' was refused: " << p.message;
    }
  }
  EXPECT_GT(cases, 300);
}

TEST(CliOptions, RangesSayWhatIsAllowed) {
  const Parsed p = parse("load", "--batch", "0");
  EXPECT_EQ(p.status, 2);
  EXPECT_NE(p.message.find("1..16777216"), std::string::npos) << p.message;
  const Parsed shape = parse("create", "--shape", "4294967298L-2H-8S");
  EXPECT_EQ(shape.status, 2);
  EXPECT_NE(shape.message.find("2L-2H-8S"), std::string::npos) << shape.message;
  EXPECT_EQ(parse("run", "--workload", "load").status, 2);
  EXPECT_EQ(parse("check", "--threads", "65536").status, 2);
  EXPECT_EQ(parse("check", "--threads", "32768").status, 2);
}

}  // namespace
}  // namespace gphash::cli
