"""The bench's tuned configurations: what tilec runs for a case when neither the command
line nor ``--autotune`` chooses (:func:`tuned_config`), and the space ``--autotune`` searches
(:func:`autotune_space`). The tables hold the best measured configurations per product
family and problem class (benchmarks/NOTES.md); rules move a case off its table entry where
a measured effect says so, each beside the figures that justify it:

- ``tables``: the table entries, and the bench's dtype families;
- ``measure``: the problem class, tile counts, the share of a wave spent on the product;
- ``split``: split-K where the tiles leave SMs idle;
- ``skinny``: short M, skinny products, larger tiles split in clusters;
- ``swap``: ragged M over a deep K, in tall tiles or the swapped product;
- ``rounds``: many tiles, in the tile and schedule that fill the waves best;
- ``trace``: the rules in words, and the record of which moved a case (``explain --tuned``);
- ``choose``: the table entry, then the rules, in order;
- ``autotune``: the autotuner's space.

The rule functions keep the names ``explain --tuned`` prints (``trace.RULES``), their
leading underscore included."""
from __future__ import annotations

from .autotune import autotune_space
from .choose import config_words, describe_tuned, on_wgmma, tuned_config, tuned_rules
from .measure import ONE_WAVE, problem_class
from .tables import C_DTYPES, FAMILY, FP8_TUNED, SIXTEEN_BIT, TILEC_AS, TUNED

__all__ = ["C_DTYPES", "FAMILY", "FP8_TUNED", "ONE_WAVE", "SIXTEEN_BIT", "TILEC_AS", "TUNED",
           "autotune_space", "config_words", "describe_tuned", "on_wgmma", "problem_class",
           "tuned_config", "tuned_rules"]
