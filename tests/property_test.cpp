// The CPU engine against the sequential model, for every shape, key width and value kind.
#include "property_common.h"

namespace gphash::testing {
namespace {

class PropertyTest : public ::testing::TestWithParam<PropertyCase> {};

TEST_P(PropertyTest, MatchesSequentialModelAcrossResizesAndReopens) { run_property_case(GetParam()); }

std::vector<PropertyCase> cpu_cases() {
  OpenOptions one, three;
  one.threads = 1;
  three.threads = 3;
  std::vector<PropertyCase> cases = cases_for({{three, "t3"}});
  for (PropertyCase& c : cases)
    if (c.value_width == 5) c.options = one, c.label = "t1";
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllConfigurations, PropertyTest, ::testing::ValuesIn(cpu_cases()), case_name);

}  // namespace
}  // namespace gphash::testing
