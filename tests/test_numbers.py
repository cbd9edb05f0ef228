"""``deltacells._numbers``: durations for people (``validate --remove-staging``'s ages), both ways."""

from __future__ import annotations

import pytest

from deltacells._numbers import format_age, parse_age


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5h", 5400), ("7d", 604800)]
)
def test_ages_parse(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "soon", "1w", "inf", "nan"])
def test_bad_ages_say_what_to_give(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration.*30m, 2h or 7d"):
        parse_age(text)


def test_ages_print() -> None:
    assert [format_age(s) for s in (None, 5, 600, 7300, 86400, 3 * 86400)] == [
        "an unknown time", "5 s", "10 min", "2 h", "1 day", "3 days"
    ]  # fmt: skip
