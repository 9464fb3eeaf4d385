"""Instruction families and data-movement families."""
