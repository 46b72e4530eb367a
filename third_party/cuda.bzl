"""cuda_library: compiles .cu files with nvcc (one genrule per file) into position-independent objects
and wraps them in a cc_library. Only targets reached through --config=cuda (the //tensor/cuda:enabled
config_setting) should depend on it; the generated targets are tagged `manual` so that a plain
`bazel build //...` never runs nvcc. Each genrule runs `nvcc -c -Xcompiler -fPIC` into a .pic.o, which a
cc_library's srcs link like any object."""

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_90 machine code (H100/H200) plus compute_90 PTX that newer GPUs JIT-compile.
NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "-Xcompiler",
    "-fPIC",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_90,code=compute_90",
    "--expt-relaxed-constexpr",
]

def cuda_library(name, srcs, hdrs = [], nvcc_hdrs = [], deps = [], visibility = None):
    """One cc_library `name` holding the nvcc-compiled objects of `srcs`.

    Args:
      name: the cc_library's name.
      srcs: .cu files of this package.
      hdrs: headers of this package, exported by the cc_library and visible to nvcc.
      nvcc_hdrs: further headers (labels, e.g. "//tensor:functors.h") the .cu files include.
      deps: cc deps of the library (e.g. "@cuda//:cudart").
      visibility: of the cc_library.
    """
    objs = []
    for src in srcs:
        stem = src[:-len(".cu")].replace("/", "_")
        obj = "%s_%s.pic.o" % (name, stem)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem),
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [obj],
            cmd = "%s %s -I. -I$(GENDIR) -c $(location %s) -o $@" % (NVCC, " ".join(NVCC_FLAGS), src),
            tags = ["manual"],
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps,
        tags = ["manual"],
        visibility = visibility,
        alwayslink = True,
    )
