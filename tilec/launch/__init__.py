"""From arguments to a launch: binding and specialisation, operand packing, the split-K
workspace."""
