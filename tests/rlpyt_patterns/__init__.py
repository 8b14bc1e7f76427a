"""Pattern modules and a shared driver for the rlpyt drop-in tests."""
