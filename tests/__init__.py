"""The suite, by layer: each folder tests the package of the same name."""
