"""Test doubles for unit tests of code built on Clearance.

`ScriptedModel` answers from a queue; `FunctionModel` answers with a function of the
request. Both record every `ModelRequest` they receive, so tests assert on what a model
was actually sent.
"""

from clearance.testing._models import FunctionModel, ScriptedModel

__all__ = ["FunctionModel", "ScriptedModel"]
