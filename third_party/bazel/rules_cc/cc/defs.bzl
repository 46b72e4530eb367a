"""Offline stand-in for rules_cc: re-exports Bazel's native C++ rules (see shared FACTS.md)."""
cc_library = native.cc_library
cc_binary = native.cc_binary
cc_test = native.cc_test
cc_import = native.cc_import
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
cc_proto_library = native.cc_proto_library
