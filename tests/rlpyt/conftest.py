# The env, driver and memory-child modules import rlpyt; they run only in the child processes
# the twin tests start, so doctest collection must not import them.
collect_ignore = ["envs.py", "driver.py", "memory_child.py"]
