"""``python -m clearance``: the command-line tool.

``python -m`` puts the current folder first on ``sys.path``; it is taken off again (as
``python -P`` would), so that the command behaves as the installed ``clearance`` does: a
file of the current folder, which may be a project under review, never stands in for a
module Clearance imports later. A team file's own modules are still found there
(`clearance._core.user_modules`).
"""

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd():
    del sys.path[0]

from clearance.cli import main

main()
