"""Tools for users' own tests: does my training script resume exactly?

check_resume   run a training command uninterrupted and killed-and-resumed; compare
               every checkpoint's digests (``namedschema check-resume`` on the command line)
ResumeReport   its verdict: ``exact``, ``status``, ``exit_code``, the kills, the first difference
KilledRun      one killed run of the check
Kill           one SIGKILL: the step, during a checkpoint write or not, where it resumed
Difference     the first record that differs: step, objects, first differing tensor/array

The audit records compared are written by the checkpoint writers themselves
(``namedschema.training.audit``) when the checker sets ``NAMEDSCHEMA_AUDIT``;
``NAMEDSCHEMA_CHECK_DIR`` names each run's fresh working directory.

Modules: ``runs`` (starting, following and killing one run), ``compare`` (the records of
two runs), ``check`` (the plan of kills and the verdict).
"""

from .check import Kill, KilledRun, ResumeReport, check_resume
from .compare import Difference
from .runs import ENV_CHECK_DIR

__all__ = ["check_resume", "ResumeReport", "KilledRun", "Kill", "Difference", "ENV_CHECK_DIR"]
