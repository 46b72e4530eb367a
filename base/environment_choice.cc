#include "base/environment_choice.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/check.h"

namespace ddp {

size_t EnvironmentChoice(const char* name, std::initializer_list<const char*> values) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return 0;
  size_t index = 0;
  for (const char* value : values) {
    if (std::strcmp(env, value) == 0) return index;
    ++index;
  }
  std::string expected;
  index = 0;
  for (const char* value : values) {
    expected += index == 0 ? "" : index + 1 == values.size() ? " or " : ", ";
    expected += value;
    ++index;
  }
  DDP_CHECK(false) << name << "=\"" << env << "\": expected " << expected;
  return 0;
}

bool EnvironmentSwitch(const char* name, const char* when_false, const char* when_true) {
  return EnvironmentChoice(name, {when_false, when_true}) == 1;
}

}  // namespace ddp
