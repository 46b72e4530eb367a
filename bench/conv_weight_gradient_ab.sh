#!/bin/bash
# The weight gradients of the convolutions on oneDNN's backward-weights primitive against im2col, ours
# only (Note [Float32 weight gradients on im2col without AVX-512], tensor/conv_onednn.h): bench/environment_ab.sh
# with DDP_CONV_WEIGHT_GRAD=primitive, then =im2col, in every round (A/B > 1: im2col faster).
#
#   bash bench/conv_weight_gradient_ab.sh [model (default resnet18)] [rounds (default 3)]
#   STEPS=5 WARMUP=1 RT=0 taskset -c 1 bash bench/contend.sh 1 bash bench/conv_weight_gradient_ab.sh
exec bash "$(dirname "$0")/environment_ab.sh" DDP_CONV_WEIGHT_GRAD "primitive im2col" "$@"
