import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "long_conversation.py"


@pytest.mark.embedded
async def test_long_conversation_runs_to_the_end_on_the_embedded_model(tmp_path):
    spec = importlib.util.spec_from_file_location("long_conversation", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["long_conversation"] = module
    spec.loader.exec_module(module)
    outcome = await module.main(16, workdir=tmp_path)
    assert outcome.turns == 16
    assert outcome.compressions >= 1
    assert outcome.max_prompt_tokens <= outcome.context_window
    assert outcome.verified
