"""Running kernels without a GPU: the tile-IR interpreter, the lowered-op executor, and the
whole-tensor float64 reference."""
