"""What tilec keeps on disk between processes: compiled PTX and tuning results
(``disk.py``), and the one bounded, no-follow reader every on-disk cache goes through
(``safe_files.py``). The package's own module imports nothing."""
