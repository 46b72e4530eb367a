// Implemented by the conv/pool/norm work; see tensor/ops.h.
