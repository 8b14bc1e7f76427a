"""The scripts here are what check-resume runs in child processes, not test modules."""

collect_ignore = ["rlpyt_flash.py", "loop_script.py"]
