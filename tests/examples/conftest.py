"""The CleanRL driver runs in child processes; without torch nothing here can run."""

try:
    import torch  # noqa: F401
except ImportError:
    collect_ignore = ["cleanrl_driver.py", "test_cleanrl_diffs.py", "test_cleanrl_resume.py"]
else:
    collect_ignore = ["cleanrl_driver.py"]
