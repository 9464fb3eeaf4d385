"""Facts about the hardware targets: shared-memory layouts, swizzles and lane geometry."""
