// Kernel and behaviour switches read from the environment (DDP_CONV_KERNEL=im2col, DDP_CPU_HUGE_PAGES=0):
// one reader, so every switch treats an unset or empty variable as its default and stops on a value it does
// not know, naming the variable, the value and the values it takes.
#ifndef DDP_BASE_ENVIRONMENT_CHOICE_H_
#define DDP_BASE_ENVIRONMENT_CHOICE_H_

#include <cstddef>
#include <initializer_list>

namespace ddp {

// The index of environment variable `name`'s value in `values`: 0 where the variable is unset or empty, so
// values[0] names the default. Any other value stops the process (DDP_CHECK) with
// `name="value": expected a, b or c`. Reads the environment on every call; callers that read a switch
// once keep the result in a static.
size_t EnvironmentChoice(const char* name, std::initializer_list<const char*> values);

// A two-way switch: false where `name` is unset, empty or `when_false`, true where it is `when_true`; any
// other value stops the process as EnvironmentChoice does.
bool EnvironmentSwitch(const char* name, const char* when_false, const char* when_true);

}  // namespace ddp

#endif  // DDP_BASE_ENVIRONMENT_CHOICE_H_
