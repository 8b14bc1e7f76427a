"""The files here are input for mypy and pyright (tests/meta/test_static_typing.py), not tests:
some must fail type checking and some would fail if run, so pytest never imports them."""

collect_ignore_glob = ["pass_*.py", "fail_*.py"]
