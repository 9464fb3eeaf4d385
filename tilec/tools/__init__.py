"""The tools behind the CLI's verbs (explain, bisect, viz, bench, autotune, sass); each is
usable from Python and none imports the CLI."""
