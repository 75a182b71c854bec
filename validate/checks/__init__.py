"""The checks of the validation suite, in the order they run (file names sort by number)."""
