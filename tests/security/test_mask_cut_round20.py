"""What a cut leaves of a secret is masked even when one side keeps only 1 or 2 characters.

`mask_cut` masked the beginning of a secret before a cut mark (``...``) and its end after
one only when 3 characters or more were left: a validation error showing ``'Bearer
bea...et'`` masked ``bea`` and left ``et``, the secret's last two characters. A piece of 1
or 2 characters alone is too common to be taken for a secret (``'wo...rld'``), but not
when the other side of the same cut holds the other end of the same secret: the two pieces
together (3 characters or more) are as good a sign as one piece of 3 was.
"""

from __future__ import annotations

import pytest

from clearance._core.masking import MASK, mask_cut

SECRET = "Zq7-cut-secret-r20-XY"
OTHER = "plain-other-secret-77"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        # one side long enough, the other short: both ends go
        (f"'x {SECRET[:5]}...{SECRET[-2:]} y'", f"'x {MASK}...{MASK} y'"),
        (f"'x {SECRET[:1]}...{SECRET[-9:]} y'", f"'x {MASK}...{MASK} y'"),
        # two short ends of the same secret: 2 + 1, 1 + 2, 2 + 2 characters
        (f"'x {SECRET[:2]}...{SECRET[-1:]} y'", f"'x {MASK}...{MASK} y'"),
        (f"'x {SECRET[:1]}...{SECRET[-2:]} y'", f"'x {MASK}...{MASK} y'"),
        (f"input_value='{SECRET[:2]}...{SECRET[-2:]}'", f"input_value='{MASK}...{MASK}'"),
        # with the ellipsis character, and a second cut in the same text
        (
            f"a {SECRET[:2]}\u2026{SECRET[-2:]} b {SECRET[:4]}...",
            f"a {MASK}\u2026{MASK} b {MASK}...",
        ),
    ],
)
def test_a_short_end_of_a_secret_is_masked_with_its_other_end(text: str, masked: str) -> None:
    assert mask_cut(text, [SECRET, OTHER]) == masked


@pytest.mark.parametrize(
    "text",
    [
        "wo...rld",  # no secret here at all
        f"x {SECRET[:2]}... and more",  # a secret's first two characters alone: too common
        f"... {SECRET[-2:]} and more",  # its last two alone
        f"x {SECRET[:1]}...{SECRET[-1:]} y",  # one character each: two, not three
        f"x {SECRET[:2]}...{OTHER[-2:]} y",  # the ends of two different secrets
        "a...b ... x",
    ],
)
def test_innocent_text_around_a_cut_is_left_alone(text: str) -> None:
    assert mask_cut(text, [SECRET, OTHER]) == text


def test_the_rule_of_three_characters_on_one_side_is_unchanged() -> None:
    assert mask_cut(f"x {SECRET[:3]}... y", [SECRET]) == f"x {MASK}... y"
    assert mask_cut(f"x ...{SECRET[-3:]} y", [SECRET]) == f"x ...{MASK} y"
    assert mask_cut(f"x {SECRET[:3]}...", ["abc"]) == f"x {SECRET[:3]}..."  # a 3-char secret
