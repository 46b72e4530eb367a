// The data.pkl that torch.save writes for a state_dict, made without Python: protocol 2, as PyTorch 2.x
// writes it (nn/torch_save.h puts it in the archive beside the storages).
#ifndef DDP_NN_TORCH_SAVE_PICKLE_H_
#define DDP_NN_TORCH_SAVE_PICKLE_H_

#include <string>

#include "nn/module.h"

namespace ddp {

// collections.OrderedDict of `tensors` in order, each tensor
// torch._utils._rebuild_tensor_v2(storage, 0, size, contiguous stride, False, OrderedDict()) whose storage
// is the persistent id ("storage", torch.<Type>Storage, "<i>", "cpu", numel) for the i-th tensor: only
// globals that torch.load's weights_only unpickler allows.
std::string TorchStateDictPickle(const NamedTensors& tensors);

}  // namespace ddp

#endif  // DDP_NN_TORCH_SAVE_PICKLE_H_
