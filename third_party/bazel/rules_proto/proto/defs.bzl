"""Offline stand-in for rules_proto."""
proto_library = native.proto_library
