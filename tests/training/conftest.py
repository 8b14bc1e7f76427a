"""Shared RunCheckpoint fixtures import torch: without it their users are not collected."""

try:
    import torch  # noqa: F401
except ImportError:
    collect_ignore = ["run_checkpoint_fixtures.py", "test_run_checkpoint_hardening.py"]
else:
    collect_ignore = ["run_checkpoint_fixtures.py"]
