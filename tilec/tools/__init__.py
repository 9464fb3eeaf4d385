"""The tools behind the CLI's verbs (explain, bisect, viz, bench, autotune, sass); each is
usable from Python and none imports the CLI.

arguments        the flags the verbs share, and what they mean for a tile function
checking         random inputs, references, the one error measure and tolerance
compile_command  ``tilec compile``
run_command      ``tilec run`` (on :mod:`checking`)
explain_command  ``tilec explain`` (on :mod:`explain`)
bisect, viz, bench: the library and its verb in one module each
"""
